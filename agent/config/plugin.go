package config

import (
	"encoding/json"
	"fmt"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hcldec"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	ctyjson "github.com/zclconf/go-cty/cty/json"

	basepb "github.com/fluxvm/fluxvm/plugins/base/proto"
)

// Plugin returns the block of the named plugin, or false if the file has none.
func (c *Config) Plugin(name string) (Plugin, bool) {
	for _, p := range c.Plugins {
		if p.Name == name {
			return p, true
		}
	}
	return Plugin{}, false
}

// DecodePluginConfig decodes the named plugin's `config {}` block against the
// schema the plugin reported and returns the JSON object for SetConfig.
//
// Attributes the block leaves out (or sets to null) take the schema's
// default_json, or stay out of the JSON when there is none. A plugin without a
// config block, or not named in the file at all, gets its defaults. Unknown
// attributes, nested blocks, values that do not convert to the attribute's
// type and missing required attributes are diagnostics pointing into the file.
// Values convert the way HCL always converts (1 is accepted for a string);
// the plugin still validates what it receives.
func (c *Config) DecodePluginConfig(name string, schema *basepb.ConfigSchemaResponse) ([]byte, hcl.Diagnostics) {
	var diags hcl.Diagnostics
	pluginBug := func(format string, args ...any) {
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Invalid plugin config schema",
			Detail:   fmt.Sprintf("Plugin %q reports a config schema the agent cannot use: %s. This is a bug in the plugin.", name, fmt.Sprintf(format, args...)),
		})
	}

	type attrInfo struct {
		ty       cty.Type
		def      cty.Value // cty.NilVal when there is no default
		required bool
	}
	attrs := schema.GetAttributes()
	infos := make(map[string]attrInfo, len(attrs))
	spec := hcldec.ObjectSpec{}
	for _, a := range attrs {
		n := a.GetName()
		if !hclsyntax.ValidIdentifier(n) {
			pluginBug("attribute name %q is not a valid HCL identifier", n)
			continue
		}
		if _, dup := infos[n]; dup {
			pluginBug("attribute %q is listed twice", n)
			continue
		}
		ty, ok := schemaType(a.GetType())
		if !ok {
			pluginBug("attribute %q has type %v; the contract allows string, number, bool, list(string), map(string)", n, a.GetType())
			continue
		}
		info := attrInfo{ty: ty, required: a.GetRequired()}
		if dj := a.GetDefaultJson(); dj != "" {
			v, err := ctyjson.Unmarshal([]byte(dj), ty)
			if err != nil {
				pluginBug("default_json of %q is not a %s: %v", n, ty.FriendlyName(), err)
				continue
			}
			if !v.IsNull() {
				info.def = v
			}
		}
		infos[n] = info
		// Required is checked below rather than by hcldec so that a plugin
		// without a config block gets a message pointing at its plugin block.
		spec[n] = &hcldec.AttrSpec{Name: n, Type: ty}
	}
	if diags.HasErrors() {
		return nil, diags
	}

	body := hcl.EmptyBody()
	missingAt := (*hcl.Range)(nil)
	if p, ok := c.Plugin(name); ok {
		missingAt = &p.DeclRange
		if p.config != nil {
			body = p.config
			r := p.config.MissingItemRange()
			missingAt = &r
		}
	}
	val, d := hcldec.Decode(body, spec, nil)
	diags = append(diags, d...)
	if diags.HasErrors() {
		return nil, sortDiags(diags)
	}

	out := make(map[string]json.RawMessage, len(infos))
	for n, info := range infos {
		v := cty.NullVal(info.ty)
		if val.Type().IsObjectType() && val.Type().HasAttribute(n) {
			v = val.GetAttr(n)
		}
		if v.IsNull() {
			if info.required {
				diags = append(diags, &hcl.Diagnostic{
					Severity: hcl.DiagError,
					Summary:  "Missing required argument",
					Detail:   fmt.Sprintf("Plugin %q needs the argument %q in its config block.", name, n),
					Subject:  missingAt,
				})
				continue
			}
			if info.def == cty.NilVal {
				continue
			}
			v = info.def
		}
		b, err := ctyjson.Marshal(v, info.ty)
		if err != nil {
			// Only unknown values fail to marshal, and without an evaluation
			// context no expression can produce one.
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Invalid plugin config value",
				Detail:   fmt.Sprintf("Plugin %q argument %q cannot be encoded: %v.", name, n, err),
				Subject:  missingAt,
			})
			continue
		}
		out[n] = b
	}
	if diags.HasErrors() {
		return nil, sortDiags(diags)
	}
	js, err := json.Marshal(out)
	if err != nil {
		return nil, append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Cannot encode plugin config", Detail: err.Error()})
	}
	return js, diags
}

// schemaType maps the plugin contract's attribute types to cty types.
func schemaType(t basepb.AttributeType) (cty.Type, bool) {
	switch t {
	case basepb.AttributeType_ATTRIBUTE_TYPE_STRING:
		return cty.String, true
	case basepb.AttributeType_ATTRIBUTE_TYPE_NUMBER:
		return cty.Number, true
	case basepb.AttributeType_ATTRIBUTE_TYPE_BOOL:
		return cty.Bool, true
	case basepb.AttributeType_ATTRIBUTE_TYPE_LIST_STRING:
		return cty.List(cty.String), true
	case basepb.AttributeType_ATTRIBUTE_TYPE_MAP_STRING:
		return cty.Map(cty.String), true
	}
	return cty.NilType, false
}
