package config

import (
	"maps"
	"reflect"
	"slices"
	"strings"
)

// checkFields checks the rules the tags of the struct *v carry (required,
// enum, when, min, max, positive, nonempty) and those of its inline sections,
// in field order; path is the struct's own. Each type's validate calls it
// for its own fields before the rules no tag expresses, so a new section
// inside Config, or a new field with a tag rule, needs no code here.
//
// In strict mode (Parse, after defaults were filled in) a zero value in a
// defaulted field was written in the file and is judged; otherwise it
// means the default. A zero value in a field without a default means
// absent and is judged only by required.
func checkFields(errs *errorList, path string, v any, strict bool) {
	rv := reflect.ValueOf(v).Elem()
	checkStruct(errs, typeOf(rv.Type()), path, rv, 0, strict)
}

func checkStruct(errs *errorList, ti *typeInfo, path string, v reflect.Value, line int, strict bool) {
	for _, f := range ti.fields {
		if f.line {
			line = int(v.Field(f.index).Int())
		}
	}
	// The when= rules apply only under a known disc value: an unknown or
	// missing one is reported once, on the disc field itself.
	disc, discKnown := "", false
	if ti.disc != nil {
		disc = v.Field(ti.disc.index).String()
		discKnown = slices.Contains(ti.disc.enum, disc)
	}
	for _, f := range ti.fields {
		if f.key == "" {
			continue
		}
		fp, fv := joinPath(path, f.key), v.Field(f.index)
		if f.when != nil {
			if !discKnown {
				continue
			}
			applies := slices.Contains(f.when, disc)
			switch {
			case applies && f.requiredFor(disc) && blank(fv):
				errs.add(fp, line, "required for %s %s", ti.disc.disc, disc)
				continue
			case !applies && !isZero(fv):
				errs.add(fp, line, "not allowed for %s %s", ti.disc.disc, disc)
				continue
			}
		} else if f.required && blank(fv) {
			if f.enum != nil {
				errs.add(fp, line, "required; must be one of %s", strings.Join(f.enum, ", "))
			} else {
				errs.add(fp, line, "required")
			}
			continue
		}
		// A zero number is the default (or absent) unless strict says it
		// was written over a default; behind a pointer, nil is.
		zeroOK := (fv.CanInt() && fv.Int() == 0 || fv.CanFloat() && fv.Float() == 0) && (f.def == "" || !strict)
		if f.kind == kFloatPtr {
			if fv.IsNil() {
				continue
			}
			fv, zeroOK = fv.Elem(), false
		}
		switch {
		case f.enum != nil && f.kind == kStrings:
			for i := range fv.Len() {
				if s := fv.Index(i).String(); !slices.Contains(f.enum, s) {
					errs.add(indexPath(fp, i), line, "must be one of %s (got %q)", strings.Join(f.enum, ", "), truncate(s, 40))
				}
			}
		case f.enum != nil:
			s := fv.String()
			if (s == "" && !f.required && (f.def == "" || !strict)) || slices.Contains(f.enum, s) {
				break
			}
			if f.secret {
				errs.add(fp, line, "must be one of %s", strings.Join(f.enum, ", "))
			} else {
				errs.add(fp, line, "must be one of %s (got %q)", strings.Join(f.enum, ", "), truncate(s, 40))
			}
		case f.kind == kFloatMap:
			for _, k := range slices.Sorted(maps.Keys(fv.Interface().(map[string]float64))) {
				x := fv.MapIndex(reflect.ValueOf(k)).Float()
				if f.fmin != nil && x < *f.fmin {
					errs.add(fp+"."+k, line, "must be >= %g", *f.fmin)
				}
				if f.fmax != nil && x > *f.fmax {
					errs.add(fp+"."+k, line, "must be <= %g", *f.fmax)
				}
			}
		case f.min != nil && !zeroOK && fv.Int() < int64(*f.min):
			errs.add(fp, line, "must be >= %d", *f.min)
		case f.max != nil && fv.Int() > int64(*f.max):
			errs.add(fp, line, "must be <= %d", *f.max)
		case f.fmin != nil && !zeroOK && fv.Float() < *f.fmin:
			errs.add(fp, line, "must be >= %g", *f.fmin)
		case f.fmax != nil && fv.Float() > *f.fmax:
			errs.add(fp, line, "must be <= %g", *f.fmax)
		case f.positive && !zeroOK && fv.Int() <= 0:
			errs.add(fp, line, "must be > 0")
		case f.nonempty != "" && fv.Len() == 0:
			if f.kind == kStrings {
				errs.add(fp, line, "must list at least one %s", f.nonempty)
			} else {
				errs.add(fp, line, "must name at least one %s", f.nonempty)
			}
		case f.kind == kStruct:
			checkStruct(errs, f.elem, fp, fv, line, strict)
		}
	}
}

// blank reports whether a required value is missing: a string of spaces
// counts as missing, as it is trimmed away or useless.
func blank(v reflect.Value) bool {
	if v.Kind() == reflect.String {
		return strings.TrimSpace(v.String()) == ""
	}
	return isZero(v)
}

// isZero reports whether a value is unset: empty lists and maps count as
// unset, as they configure nothing.
func isZero(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Slice, reflect.Map:
		return v.Len() == 0
	}
	return v.IsZero()
}
