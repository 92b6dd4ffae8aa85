package base

import (
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// The contracts' enums name their values PREFIX_NAME, with PREFIX_UNSPECIFIED
// as the zero value (GUEST_OS_LINUX, EXIT_REASON_CRASHED). People, HCL and
// the node API spell the same values "linux" and "crashed"; these two
// functions translate, so no package keeps a table of its own.

// EnumName returns the lower-case name of an enum value without its prefix:
// "linux" for GUEST_OS_LINUX. It is "" for the UNSPECIFIED value and for a
// number the enum does not define (sent by a newer peer).
func EnumName(v protoreflect.Enum) string {
	if v.Number() == 0 {
		return ""
	}
	values := v.Descriptor().Values()
	d := values.ByNumber(v.Number())
	if d == nil {
		return ""
	}
	return strings.ToLower(strings.TrimPrefix(string(d.Name()), enumPrefix(values)))
}

// ParseEnum is the reverse of EnumName: ParseEnum[driverpb.GuestOS]("linux")
// is GUEST_OS_LINUX. It reports false for "" and for a name the enum does not
// define.
func ParseEnum[E interface {
	~int32
	Descriptor() protoreflect.EnumDescriptor
}](name string) (E, bool) {
	var zero E
	if name == "" || strings.ToLower(name) != name {
		return zero, false
	}
	values := zero.Descriptor().Values()
	d := values.ByName(protoreflect.Name(enumPrefix(values) + strings.ToUpper(name)))
	if d == nil || d.Number() == 0 {
		return zero, false
	}
	return E(d.Number()), true
}

// enumPrefix is what every value name of an enum starts with: the zero
// value's name without UNSPECIFIED.
func enumPrefix(values protoreflect.EnumValueDescriptors) string {
	if zero := values.ByNumber(0); zero != nil {
		return strings.TrimSuffix(string(zero.Name()), "UNSPECIFIED")
	}
	return ""
}
