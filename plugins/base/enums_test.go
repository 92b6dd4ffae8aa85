package base

import (
	"testing"

	basepb "github.com/fluxvm/fluxvm/plugins/base/proto"
)

// TestEnumNamesRoundTrip checks that every defined value of an enum has a
// lower-case name that parses back to it, and that UNSPECIFIED, unknown
// numbers and unknown or upper-case names have none.
func TestEnumNamesRoundTrip(t *testing.T) {
	for num := range basepb.LogLevel_name {
		v := basepb.LogLevel(num)
		name := EnumName(v)
		if num == 0 {
			if name != "" {
				t.Errorf("EnumName(%v) = %q, want \"\"", v, name)
			}
			continue
		}
		back, ok := ParseEnum[basepb.LogLevel](name)
		if !ok || back != v {
			t.Errorf("%v is named %q, which parses to %v, %v", v, name, back, ok)
		}
	}
	if got := EnumName(basepb.LogLevel_LOG_LEVEL_WARN); got != "warn" {
		t.Errorf("EnumName(LOG_LEVEL_WARN) = %q, want \"warn\"", got)
	}
	if got := EnumName(basepb.LogLevel(99)); got != "" {
		t.Errorf("EnumName(99) = %q, want \"\"", got)
	}
	for _, bad := range []string{"", "unspecified", "WARN", "LOG_LEVEL_WARN", "verbose"} {
		if v, ok := ParseEnum[basepb.LogLevel](bad); ok {
			t.Errorf("ParseEnum(%q) = %v, want no value", bad, v)
		}
	}
}
