package api

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/drainer"
	"github.com/fluxvm/fluxvm/central/keys"
	"github.com/fluxvm/fluxvm/central/pools"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/webhooks"
	"github.com/fluxvm/fluxvm/sdk"
)

// jsonKeys lists the keys of the JSON a value of type typ is written as
// when every field is set (fill), nested ones as parent.child and a slice's
// elements as parent[].child, so two types can be compared key for key. It
// reads what encoding/json writes, so a record's embedded sdk type counts
// with its keys, and a key the record leaves out of storage does not.
func jsonKeys(t *testing.T, typ reflect.Type) []string {
	v := reflect.New(typ)
	fill(v.Elem())
	b, err := json.Marshal(v.Interface())
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	var out []string
	var walk func(v any, key string)
	walk = func(v any, key string) {
		switch v := v.(type) {
		case []any:
			walk(v[0], key+"[]")
		case map[string]any:
			for k, e := range v {
				if key != "" {
					k = key + "." + k
				}
				out = append(out, k)
				walk(e, k)
			}
		}
	}
	walk(doc, "")
	return out
}

// TestWireTypesCarryEveryRecordField holds each store record, as it is
// stored, and the sdk type its answer is built from to the same JSON keys,
// so that a field added to one and not the other (nor to its conversion)
// fails here rather than vanishing from the API. The policy and the catalog
// image have no pair: the store keeps them as their sdk type
// (central/store/records.go).
func TestWireTypesCarryEveryRecordField(t *testing.T) {
	for _, c := range []struct {
		name         string
		record, wire reflect.Type
		wireOnly     []string // computed for the answer
		storageOnly  []string // never shown
	}{
		{"pool", reflect.TypeFor[store.Pool](), reflect.TypeFor[sdk.Pool](), []string{"shared"}, nil},
		{"drain", reflect.TypeFor[store.Drain](), reflect.TypeFor[sdk.Drain](), []string{"draining"}, nil},
		{"node", reflect.TypeFor[store.Node](), reflect.TypeFor[sdk.FleetNode](), nil, nil},
		{"tenant", reflect.TypeFor[store.Tenant](), reflect.TypeFor[sdk.Tenant](), nil, []string{"token_sha256"}},
		{"lease", reflect.TypeFor[store.Lease](), reflect.TypeFor[sdk.Lease](), []string{"active"}, nil},
		{"api key", reflect.TypeFor[store.APIKey](), reflect.TypeFor[sdk.APIKey](), nil, []string{"tenant", "token_sha256"}},
		{"webhook", reflect.TypeFor[store.Webhook](), reflect.TypeFor[sdk.Webhook](), nil, []string{"secret"}},
	} {
		rec, wire := jsonKeys(t, c.record), jsonKeys(t, c.wire)
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
		lease  = filled(&store.Lease{}).(*store.Lease)
		key    = filled(&store.APIKey{}).(*store.APIKey)
		hook   = filled(&store.Webhook{}).(*store.Webhook)
	)
	for _, c := range []struct {
		name         string
		record, wire any
		wireOnly     []string
		storageOnly  []string
	}{
		{"pool", pool, pools.Wire(*pool), []string{"shared"}, nil},
		{"drain", drain, drainer.Wire(*drain), nil, nil},
		{"node", node, wireNode(node), nil, nil},
		{"tenant", tenant, wireTenant(tenant), nil, []string{"token_sha256"}},
		{"lease", lease, leaseOf(lease), []string{"active"}, nil},
		{"api key", key, keys.Wire(*key), nil, []string{"tenant", "token_sha256"}},
		{"webhook", hook, webhooks.Wire(*hook), nil, []string{"secret"}},
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
