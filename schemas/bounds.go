package schemas

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/getkin/kin-openapi/openapi3"
)

// OutOfRange is a request value outside the range its description gives it:
// a number beyond minimum or maximum, a string longer than maxLength, a list
// or object with more entries than maxItems or maxProperties. It names the
// value and what is allowed, never the value itself (it may be a megabyte
// long, or a secret).
type OutOfRange struct {
	// Field is the value's JSON path in the body, built from the
	// description's own names ("hours", "quota.max_vms",
	// "mac_classes[2].per_hour", "labels.*" for any value of a map), or the
	// query parameter's name.
	Field string
	// Query says Field is a query parameter.
	Query bool
	// Want is what is allowed: "from 1 to 5000", "at most 256 characters".
	Want string
}

func (e *OutOfRange) Error() string {
	if e.Query {
		return fmt.Sprintf("query parameter %q must be %s", e.Field, e.Want)
	}
	return fmt.Sprintf("field %q must be %s", e.Field, e.Want)
}

// fleetSpec is the fleet API's description, loaded on first use: a server
// that checks every request against it parses the YAML once per process.
var fleetSpec = sync.OnceValues(func() (*Spec, error) { return Load(Fleet) })

// FleetSpec is the fleet API's description, loaded once and shared (a Spec
// is only read after Load).
func FleetSpec() (*Spec, error) { return fleetSpec() }

// maxDepth bounds how deep Bounds follows a body; the descriptions nest a
// handful of levels, so anything deeper is not a request any handler takes.
const maxDepth = 32

// Bounds holds one request to the ranges of its operation's description:
// method and route name the operation as the description does ("POST",
// "/fleet/leases/{id}/release"), query is the request's query and body its
// JSON body (nil for none). It answers only for values outside their range
// (minimum, maximum, exclusiveMinimum, exclusiveMaximum, maxLength,
// maxItems, maxProperties); a body that is not JSON, a value of the wrong
// type, an unknown or missing field is left to the handler, which says
// what is wrong in its own words. Every occurrence of a field counts: a
// key given twice, or in another letter case (which encoding/json matches
// to the same field), is checked each time.
func (s *Spec) Bounds(method, route string, query url.Values, body []byte) *OutOfRange {
	item := s.Doc.Paths.Value(route)
	if item == nil {
		return nil
	}
	op := item.GetOperation(strings.ToUpper(method))
	if op == nil {
		return nil
	}
	for _, params := range []openapi3.Parameters{item.Parameters, op.Parameters} {
		for _, pr := range params {
			p := pr.Value
			if p == nil || p.In != openapi3.ParameterInQuery || p.Schema == nil || p.Schema.Value == nil {
				continue
			}
			for _, v := range query[p.Name] {
				if e := queryBounds(p.Schema.Value, v); e != "" {
					return &OutOfRange{Field: p.Name, Query: true, Want: e}
				}
			}
		}
	}
	if len(bytes.TrimSpace(body)) == 0 || op.RequestBody == nil || op.RequestBody.Value == nil {
		return nil
	}
	mt := op.RequestBody.Value.Content.Get("application/json")
	if mt == nil || mt.Schema == nil {
		return nil
	}
	// A body that is not one JSON value is the handler's to refuse.
	raw := bytes.TrimSpace(body)
	if !json.Valid(raw) {
		return nil
	}
	return walk(raw, mt.Schema, "", 0)
}

// queryBounds checks one query parameter's value; "" when it is in range
// or not a number at all (the handler says so).
func queryBounds(s *openapi3.Schema, v string) string {
	if !s.Type.Permits(openapi3.TypeNumber) && !s.Type.Permits(openapi3.TypeInteger) {
		if s.Type.Permits(openapi3.TypeString) && s.MaxLength != nil && uint64(utf8.RuneCountInString(v)) > *s.MaxLength {
			return fmt.Sprintf("at most %d characters", *s.MaxLength)
		}
		return ""
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil && !math.IsInf(f, 0) { // not a number; an overflow is out of range
		return ""
	}
	return numberBounds(s, f)
}

// walk checks one JSON value (valid JSON, from a Decode) against a schema.
func walk(raw []byte, ref *openapi3.SchemaRef, path string, depth int) *OutOfRange {
	if ref == nil || ref.Value == nil || depth > maxDepth {
		return nil
	}
	s := ref.Value
	for _, sub := range s.AllOf {
		if e := walk(raw, sub, path, depth+1); e != nil {
			return e
		}
	}
	kind := jsonKind(raw)
	for _, alts := range []openapi3.SchemaRefs{s.OneOf, s.AnyOf} {
		// The value is held to the alternatives of its own kind; it is out
		// of range only when none of them takes it.
		var first *OutOfRange
		for _, sub := range alts {
			if sub == nil || sub.Value == nil || !permits(sub.Value, kind) {
				continue
			}
			e := walk(raw, sub, path, depth+1)
			if e == nil {
				first = nil
				break
			}
			if first == nil {
				first = e
			}
		}
		if first != nil {
			return first
		}
	}
	if !permits(s, kind) {
		return nil // the wrong type: the handler's to say
	}
	switch kind {
	case openapi3.TypeNumber:
		f, err := strconv.ParseFloat(string(raw), 64)
		if err != nil && !math.IsInf(f, 0) {
			return nil
		}
		if want := numberBounds(s, f); want != "" {
			return &OutOfRange{Field: path, Want: want}
		}
	case openapi3.TypeString:
		if s.MaxLength == nil {
			return nil
		}
		if uint64(runeCount(raw)) > *s.MaxLength {
			return &OutOfRange{Field: path, Want: fmt.Sprintf("at most %d characters", *s.MaxLength)}
		}
	case openapi3.TypeArray:
		n := 0
		items(raw, func([]byte) bool { n++; return true })
		if s.MaxItems != nil && uint64(n) > *s.MaxItems {
			return &OutOfRange{Field: path, Want: fmt.Sprintf("a list of at most %d entries", *s.MaxItems)}
		}
		var found *OutOfRange
		i := 0
		items(raw, func(it []byte) bool {
			found = walk(it, s.Items, fmt.Sprintf("%s[%d]", path, i), depth+1)
			i++
			return found == nil
		})
		return found
	case openapi3.TypeObject:
		if s.MaxProps != nil {
			// Keys too long to decode count as distinct: no property is that long.
			distinct, long := map[string]bool{}, 0
			members(raw, func(key, _ []byte) bool {
				if k, ok := keyText(key); ok {
					distinct[k] = true
				} else {
					long++
				}
				return true
			})
			if uint64(len(distinct)+long) > *s.MaxProps {
				return &OutOfRange{Field: path, Want: fmt.Sprintf("an object of at most %d entries", *s.MaxProps)}
			}
		}
		var found *OutOfRange
		members(raw, func(key, value []byte) bool {
			k, ok := keyText(key)
			name, sub := property(s, k)
			if !ok && s.AdditionalProperties.Schema != nil {
				name, sub = "*", s.AdditionalProperties.Schema // a long key of a map
			} else if !ok {
				return true // matches no property: the handler refuses it
			}
			if sub == nil {
				return true // an unknown field: the handler refuses it
			}
			child := name
			if path != "" {
				child = path + "." + name
			}
			found = walk(value, sub, child, depth+1)
			return found == nil
		})
		return found
	}
	return nil
}

// property finds the schema of an object member the way encoding/json
// finds a struct field: the exact name, else one equal under case folding.
// A member of a map (additionalProperties) is named "*": its key is the
// caller's text and is never repeated back.
func property(s *openapi3.Schema, key string) (string, *openapi3.SchemaRef) {
	if p, ok := s.Properties[key]; ok {
		return key, p
	}
	for name, p := range s.Properties {
		if strings.EqualFold(name, key) {
			return name, p
		}
	}
	if s.AdditionalProperties.Schema != nil {
		return "*", s.AdditionalProperties.Schema
	}
	return "", nil
}

// numberBounds says what is allowed when f is outside the schema's range
// ("" when it is inside). NaN and infinities are outside every range.
func numberBounds(s *openapi3.Schema, f float64) string {
	lo, hi := s.Min, s.Max
	exLo := s.ExclusiveMin.Bool != nil && *s.ExclusiveMin.Bool
	exHi := s.ExclusiveMax.Bool != nil && *s.ExclusiveMax.Bool
	if v := s.ExclusiveMin.Value; v != nil { // OpenAPI 3.1: the bound itself
		lo, exLo = v, true
	}
	if v := s.ExclusiveMax.Value; v != nil {
		hi, exHi = v, true
	}
	if lo == nil && hi == nil {
		return ""
	}
	below := lo != nil && (math.IsNaN(f) || f < *lo || exLo && f == *lo)
	above := hi != nil && (math.IsNaN(f) || f > *hi || exHi && f == *hi)
	if !below && !above {
		return ""
	}
	num := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	switch {
	case lo != nil && hi != nil && !exLo && !exHi:
		return "from " + num(*lo) + " to " + num(*hi)
	case lo != nil && hi != nil:
		return lowText(num(*lo), exLo) + " and " + highText(num(*hi), exHi)
	case lo != nil:
		return lowText(num(*lo), exLo)
	default:
		return highText(num(*hi), exHi)
	}
}

func lowText(v string, exclusive bool) string {
	if exclusive {
		return "more than " + v
	}
	return "at least " + v
}

func highText(v string, exclusive bool) string {
	if exclusive {
		return "less than " + v
	}
	return "at most " + v
}

// jsonKind is the JSON type of a valid JSON value, in the description's
// words (integers are numbers until a schema asks for more).
func jsonKind(raw []byte) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return ""
	}
	switch c := raw[0]; {
	case c == '{':
		return openapi3.TypeObject
	case c == '[':
		return openapi3.TypeArray
	case c == '"':
		return openapi3.TypeString
	case c == 't' || c == 'f':
		return openapi3.TypeBoolean
	case c == 'n':
		return openapi3.TypeNull
	default:
		return openapi3.TypeNumber
	}
}

// permits says whether a schema may describe a value of kind (a schema
// without a type describes every kind).
func permits(s *openapi3.Schema, kind string) bool {
	if kind == openapi3.TypeNumber {
		return s.Type.Permits(openapi3.TypeNumber) || s.Type.Permits(openapi3.TypeInteger)
	}
	return s.Type.Permits(kind)
}
