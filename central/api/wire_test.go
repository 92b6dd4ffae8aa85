package api

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/drainer"
	"github.com/fluxvm/fluxvm/central/pools"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/sdk"
)

// jsonKeys lists the JSON keys of t, nested ones as parent.child (a slice's
// elements as parent[].child), so two types can be compared key for key. An
// embedded struct's keys are its parent's, as encoding/json writes them.
func jsonKeys(t reflect.Type, prefix string, out *[]string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			jsonKeys(f.Type, prefix, out)
			continue
		}
		if name == "" {
			name = f.Name
		}
		key := prefix + name
		*out = append(*out, key)
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Slice {
			ft, key = ft.Elem(), key+"[]"
		}
		if ft.Kind() == reflect.Struct && ft != reflect.TypeFor[time.Time]() {
			jsonKeys(ft, key+".", out)
		}
	}
}

// TestWireTypesCarryEveryRecordField holds each store record and the sdk type
// its answer is built from to the same JSON keys, so that a field added to
// one and not the other (nor to its conversion) fails here rather than
// vanishing from the API. The policy and the catalog image have no pair:
// the store keeps them as their sdk type (central/store/records.go).
func TestWireTypesCarryEveryRecordField(t *testing.T) {
	for _, c := range []struct {
		name         string
		record, wire reflect.Type
		wireOnly     []string // computed for the answer
		storageOnly  []string // never shown
	}{
		{"pool", reflect.TypeFor[store.Pool](), reflect.TypeFor[sdk.Pool](), []string{"shared", "mode"}, nil},
		{"drain", reflect.TypeFor[store.Drain](), reflect.TypeFor[sdk.Drain](), []string{"draining"}, nil},
		{"node", reflect.TypeFor[store.Node](), reflect.TypeFor[sdk.FleetNode](), nil, nil},
		{"tenant", reflect.TypeFor[store.Tenant](), reflect.TypeFor[sdk.Tenant](), nil, []string{"token_sha256"}},
	} {
		var rec, wire []string
		jsonKeys(c.record, "", &rec)
		jsonKeys(c.wire, "", &wire)
		rec = slices.DeleteFunc(rec, func(k string) bool { return slices.Contains(c.storageOnly, k) })
		wire = slices.DeleteFunc(wire, func(k string) bool { return slices.Contains(c.wireOnly, k) })
		slices.Sort(rec)
		slices.Sort(wire)
		if !slices.Equal(rec, wire) {
			t.Errorf("%s: the record's keys %v\nare not the answer's %v", c.name, rec, wire)
		}
	}
}

// fill sets every field of v, nested ones too, to a value that is not zero,
// so that a conversion that drops a field shows it.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Date(2026, 12, 3, 14, 0, 0, 0, time.UTC)))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i))
			}
		}
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0))
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k)
		fill(e)
		v.SetMapIndex(k, e)
	case reflect.String:
		v.SetString("s")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		v.SetInt(7)
	}
}

// TestWireConversionsCopyEveryField fills each record whole and checks that
// its answer shows every field with the record's JSON.
func TestWireConversionsCopyEveryField(t *testing.T) {
	filled := func(p any) any { fill(reflect.ValueOf(p).Elem()); return p }
	var (
		pool   = filled(&store.Pool{}).(*store.Pool)
		drain  = filled(&store.Drain{}).(*store.Drain)
		node   = filled(&store.Node{}).(*store.Node)
		tenant = filled(&store.Tenant{}).(*store.Tenant)
	)
	for _, c := range []struct {
		name         string
		record, wire any
		wireOnly     []string
		storageOnly  []string
	}{
		{"pool", pool, pools.Wire(*pool), []string{"shared", "mode"}, nil},
		{"drain", drain, drainer.Wire(*drain), nil, nil},
		{"node", node, wireNode(node), nil, nil},
		{"tenant", tenant, wireTenant(tenant), nil, []string{"token_sha256"}},
	} {
		asMap := func(v any, drop []string) map[string]any {
			b, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			for _, k := range drop {
				delete(m, k)
			}
			return m
		}
		if rec, wire := asMap(c.record, c.storageOnly), asMap(c.wire, c.wireOnly); !reflect.DeepEqual(rec, wire) {
			t.Errorf("%s: the record\n%v\nis answered as\n%v", c.name, rec, wire)
		}
	}
}
