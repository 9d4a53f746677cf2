package gorpc

// The gob stream of a net/rpc connection, written and read here instead
// of with encoding/gob: gob's package initialiser builds and registers
// its type tables through reflection (~480,000 instructions, a third of
// an nftcni plugin's whole start, measured with callgrind), and Go runs
// it on every exec of the binary, whichever plugin the exec is.
//
// Only what the dhcp RPC carries is supported, with encoding/gob's
// semantics (the tests compare both ways with encoding/gob):
//   - encoding: structs whose exported fields are bools, integers,
//     strings, byte slices, structs, pointers to these and slices of
//     them; as in gob, zero-valued fields are left out (a pointer to a
//     zero is too), a nil element of a slice is an error;
//   - decoding: any stream encoding/gob writes — type definitions, then
//     values — into such structs, matching fields by name and skipping
//     fields and values the local type does not have; maps, arrays,
//     floats and marshaller-encoded values are skipped, only interface
//     values (which the RPC never sends) are refused.
//
// The format is gob's own documentation (encoding/gob's doc.go): a
// stream of messages, each an unsigned byte count then a signed type id;
// a negative id defines type -id (a wireType value follows), a positive
// one carries a value of that type.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"reflect"
)

// Type ids predefined by gob.
const (
	tBool      = 1
	tInt       = 2
	tUint      = 3
	tFloat     = 4
	tBytes     = 5
	tString    = 6
	tComplex   = 7
	tInterface = 8
	// Ids below firstUserID are gob's; types a stream defines get higher
	// ones.
	firstUserID = 64
)

// maxMessage bounds a message's length: the largest the RPC carries is a
// network configuration.
const maxMessage = 64 << 20

// wire is a type definition received from the peer (gob's wireType): one
// of a struct, a slice, an array, a map or a marshaller-encoded type.
type wire struct {
	kind      wireKind
	name      string
	fields    []wireField // struct
	elem, key int         // slice, array, map
	len       int         // array
}

type wireKind int

const (
	wireStruct wireKind = iota + 1
	wireSlice
	wireArray
	wireMap
	wireMarshaled // GobEncoder, BinaryMarshaler or TextMarshaler
)

type wireField struct {
	name string
	id   int
}

// builtin returns gob's own composite types, which describe the others;
// a peer never sends values of them, but gob's decoder would take one. (A
// switch: a package-level map would be built on every exec.)
func builtin(id int) *wire {
	switch id {
	case 16:
		return &wire{kind: wireStruct, name: "wireType", fields: []wireField{{"ArrayT", 17}, {"SliceT", 19}, {"StructT", 20},
			{"MapT", 23}, {"GobEncoderT", 24}, {"BinaryMarshalerT", 24}, {"TextMarshalerT", 24}}}
	case 17:
		return &wire{kind: wireStruct, name: "arrayType", fields: []wireField{{"CommonType", 18}, {"Elem", tInt}, {"Len", tInt}}}
	case 18:
		return &wire{kind: wireStruct, name: "CommonType", fields: []wireField{{"Name", tString}, {"Id", tInt}}}
	case 19:
		return &wire{kind: wireStruct, name: "sliceType", fields: []wireField{{"CommonType", 18}, {"Elem", tInt}}}
	case 20:
		return &wire{kind: wireStruct, name: "structType", fields: []wireField{{"CommonType", 18}, {"Field", 22}}}
	case 21:
		return &wire{kind: wireStruct, name: "fieldType", fields: []wireField{{"Name", tString}, {"Id", tInt}}}
	case 22:
		return &wire{kind: wireSlice, name: "[]fieldType", elem: 21}
	case 23:
		return &wire{kind: wireStruct, name: "mapType", fields: []wireField{{"CommonType", 18}, {"Key", tInt}, {"Elem", tInt}}}
	case 24:
		return &wire{kind: wireStruct, name: "gobEncoderType", fields: []wireField{{"CommonType", 18}}}
	}
	return nil
}

// typ is the definition of id: the stream's, or gob's own.
func (d *decoder) typ(id int) *wire {
	if w := builtin(id); w != nil {
		return w
	}
	return d.types[id]
}

// --- encoding

// encoder writes gob messages to w, defining each type once per stream.
type encoder struct {
	w    *bufio.Writer
	ids  map[reflect.Type]int // types defined on this stream
	next int
	msg  []byte // the message being built
}

func newEncoder(w *bufio.Writer) *encoder {
	return &encoder{w: w, ids: map[reflect.Type]int{}, next: firstUserID}
}

// Encode writes v, a struct or a pointer to one, preceded by the
// definitions of the types the stream has not seen yet. Nothing is
// flushed.
func (e *encoder) Encode(v any) error {
	rv := reflect.ValueOf(v)
	for rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return errors.New("gob: cannot encode nil pointer")
		}
		rv = rv.Elem()
	}
	if rv.Kind() != reflect.Struct {
		return fmt.Errorf("gob: cannot encode %s: only structs", rv.Type())
	}
	id, err := e.define(rv.Type())
	if err != nil {
		return err
	}
	e.msg = appendInt(e.msg[:0], int64(id))
	if e.msg, err = appendStruct(e.msg, rv); err != nil {
		return err
	}
	return e.flushMessage()
}

func (e *encoder) flushMessage() error {
	var head []byte
	head = appendUint(head, uint64(len(e.msg)))
	if _, err := e.w.Write(head); err != nil {
		return err
	}
	_, err := e.w.Write(e.msg)
	return err
}

// typeID is the gob type id of t: a predefined one, or one defined on
// this stream by define.
func (e *encoder) typeID(t reflect.Type) (int, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Bool:
		return tBool, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return tInt, nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return tUint, nil
	case reflect.String:
		return tString, nil
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return tBytes, nil
		}
		return e.define(t)
	case reflect.Struct:
		return e.define(t)
	}
	return 0, fmt.Errorf("gob: type %s not supported", t)
}

// define sends the definition of t (a struct or a non-byte slice) unless
// the stream has it; the definitions of the types it is made of go
// first (encoding/gob sends them after it: its decoder takes either
// order, as long as all come before the value).
func (e *encoder) define(t reflect.Type) (int, error) {
	if id, ok := e.ids[t]; ok {
		return id, nil
	}
	id := e.next
	e.next++
	e.ids[t] = id
	name := t.Name()
	if name == "" {
		name = t.String()
	}
	common := func(b []byte) []byte { // CommonType{Name, Id}
		b = appendUint(b, 1)
		b = appendString(appendUint(b, 1), name)
		b = appendInt(appendUint(b, 1), int64(id))
		return appendUint(b, 0)
	}
	var def []byte
	switch t.Kind() {
	case reflect.Struct:
		var fields []wireField
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			fid, err := e.typeID(f.Type)
			if err != nil {
				return 0, fmt.Errorf("gob: field %s of %s: %w", f.Name, t, err)
			}
			fields = append(fields, wireField{f.Name, fid})
		}
		def = appendUint(def, 3) // wireType.StructT
		def = common(def)
		if len(fields) > 0 {
			def = appendUint(appendUint(def, 1), uint64(len(fields))) // structType.Field
			for _, f := range fields {
				def = appendString(appendUint(def, 1), f.name)
				def = appendInt(appendUint(def, 1), int64(f.id))
				def = appendUint(def, 0)
			}
		}
		def = appendUint(def, 0)
	case reflect.Slice:
		eid, err := e.typeID(t.Elem())
		if err != nil {
			return 0, err
		}
		def = appendUint(def, 2) // wireType.SliceT
		def = common(def)
		def = appendInt(appendUint(def, 1), int64(eid))
		def = appendUint(def, 0)
	default:
		return 0, fmt.Errorf("gob: type %s not supported", t)
	}
	def = appendUint(def, 0) // end of wireType
	e.msg = append(appendInt(e.msg[:0], -int64(id)), def...)
	if err := e.flushMessage(); err != nil {
		return 0, err
	}
	return id, nil
}

// appendStruct appends v's non-zero exported fields as (field delta,
// value) pairs and the terminating 0.
func appendStruct(b []byte, v reflect.Value) ([]byte, error) {
	last := -1
	n := 0
	for i := 0; i < v.NumField(); i++ {
		f := v.Type().Field(i)
		if !f.IsExported() {
			continue
		}
		field := n
		n++
		fv := v.Field(i)
		for fv.Kind() == reflect.Pointer {
			if fv.IsNil() {
				break
			}
			fv = fv.Elem()
		}
		if fv.Kind() == reflect.Pointer || (fv.Kind() != reflect.Struct && fv.IsZero()) ||
			(fv.Kind() == reflect.Slice && fv.Len() == 0) {
			continue
		}
		b = appendUint(b, uint64(field-last))
		last = field
		var err error
		if b, err = appendValue(b, fv); err != nil {
			return nil, err
		}
	}
	return appendUint(b, 0), nil
}

// appendValue appends v (pointers followed), zero or not.
func appendValue(b []byte, v reflect.Value) ([]byte, error) {
	switch v.Kind() {
	case reflect.Bool:
		if v.Bool() {
			return appendUint(b, 1), nil
		}
		return appendUint(b, 0), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return appendInt(b, v.Int()), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return appendUint(b, v.Uint()), nil
	case reflect.String:
		return appendString(b, v.String()), nil
	case reflect.Struct:
		return appendStruct(b, v)
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			b = appendUint(b, uint64(v.Len()))
			return append(b, v.Bytes()...), nil
		}
		b = appendUint(b, uint64(v.Len()))
		for i := 0; i < v.Len(); i++ {
			ev := v.Index(i)
			for ev.Kind() == reflect.Pointer {
				if ev.IsNil() {
					return nil, errors.New("gob: encodeArray: nil element")
				}
				ev = ev.Elem()
			}
			var err error
			if b, err = appendValue(b, ev); err != nil {
				return nil, err
			}
		}
		return b, nil
	}
	return nil, fmt.Errorf("gob: type %s not supported", v.Type())
}

// appendUint is gob's unsigned integer: one byte below 128, else the
// negated byte count followed by the big-endian bytes.
func appendUint(b []byte, x uint64) []byte {
	if x < 0x80 {
		return append(b, byte(x))
	}
	n := (bits.Len64(x) + 7) / 8
	b = append(b, byte(-n))
	for i := n - 1; i >= 0; i-- {
		b = append(b, byte(x>>(8*i)))
	}
	return b
}

// appendInt is gob's signed integer: the value shifted left one bit, the
// bits complemented and the low bit set when negative.
func appendInt(b []byte, i int64) []byte {
	if i < 0 {
		return appendUint(b, uint64(^i<<1)|1)
	}
	return appendUint(b, uint64(i<<1))
}

func appendString(b []byte, s string) []byte {
	return append(appendUint(b, uint64(len(s))), s...)
}

// --- decoding

// decoder reads gob messages from r, keeping the stream's type
// definitions.
type decoder struct {
	r     *bufio.Reader
	types map[int]*wire
}

func newDecoder(r *bufio.Reader) *decoder {
	return &decoder{r: r, types: map[int]*wire{}}
}

// Decode reads the next value, taking in the type definitions before it,
// into v, a pointer to a struct; a nil v discards the value. io.EOF means
// the stream ended where a message could begin, before any of them.
func (d *decoder) Decode(v any) error {
	for defs := 0; ; defs++ {
		msg, err := d.message()
		if err == io.EOF && defs > 0 {
			// Definitions promise a value (gob says the same).
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			return err
		}
		b := &buf{b: msg}
		id := b.int()
		if b.err != nil {
			return b.err
		}
		if id < 0 {
			if err := d.define(int(-id), b); err != nil {
				return err
			}
			continue
		}
		if v == nil {
			return nil
		}
		rv := reflect.ValueOf(v)
		if rv.Kind() != reflect.Pointer || rv.IsNil() {
			return errors.New("gob: attempt to decode into a non-pointer")
		}
		w := d.typ(int(id))
		if w == nil || w.kind != wireStruct {
			return fmt.Errorf("gob: value of type id %d is not a struct", id)
		}
		if err := d.value(b, int(id), rv.Elem()); err != nil {
			return err
		}
		return b.err
	}
}

// message reads one length-prefixed message.
func (d *decoder) message() ([]byte, error) {
	n, err := readUint(d.r)
	if err != nil {
		return nil, err
	}
	if n == 0 || n > maxMessage {
		return nil, fmt.Errorf("gob: message of %d bytes", n)
	}
	msg := make([]byte, n)
	if _, err := io.ReadFull(d.r, msg); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return msg, nil
}

// readUint reads an unsigned integer from the stream (a message's
// length); an end of stream before it is io.EOF.
func readUint(r *bufio.Reader) (uint64, error) {
	c, err := r.ReadByte()
	if err != nil {
		return 0, err
	}
	if c < 0x80 {
		return uint64(c), nil
	}
	n := -int(int8(c))
	if n > 8 {
		return 0, errors.New("gob: malformed length")
	}
	var x uint64
	for range n {
		c, err := r.ReadByte()
		if err != nil {
			return 0, io.ErrUnexpectedEOF
		}
		x = x<<8 | uint64(c)
	}
	return x, nil
}

// define reads a wireType value defining type id.
func (d *decoder) define(id int, b *buf) error {
	if id < firstUserID || d.types[id] != nil {
		return fmt.Errorf("gob: bad or duplicate definition of type id %d", id)
	}
	w := &wire{}
	b.fields(func(f int) {
		switch f {
		case 0:
			w.kind = wireArray
		case 1:
			w.kind = wireSlice
		case 2:
			w.kind = wireStruct
		case 3:
			w.kind = wireMap
		case 4, 5, 6:
			w.kind = wireMarshaled
		default:
			b.fail("gob: unknown wireType field %d", f)
			return
		}
		b.fields(func(f int) {
			switch {
			case f == 0: // CommonType
				b.fields(func(f int) {
					switch f {
					case 0:
						w.name = b.string()
					case 1:
						b.int()
					default:
						b.fail("gob: unknown CommonType field %d", f)
					}
				})
			case w.kind == wireStruct && f == 1:
				n := b.count()
				for range n {
					var wf wireField
					b.fields(func(f int) {
						switch f {
						case 0:
							wf.name = b.string()
						case 1:
							wf.id = int(b.int())
						default:
							b.fail("gob: unknown fieldType field %d", f)
						}
					})
					w.fields = append(w.fields, wf)
				}
			case (w.kind == wireSlice || w.kind == wireArray) && f == 1:
				w.elem = int(b.int())
			case w.kind == wireArray && f == 2:
				w.len = int(b.int())
			case w.kind == wireMap && f == 1:
				w.key = int(b.int())
			case w.kind == wireMap && f == 2:
				w.elem = int(b.int())
			default:
				b.fail("gob: unknown field %d in a type definition", f)
			}
		})
	})
	if b.err != nil {
		return b.err
	}
	// An empty definition is accepted, as gob accepts it: it defines
	// nothing, and a value of that type fails when it comes (value).
	d.types[id] = w
	return nil
}

// value decodes a value of wire type id into v, allocating through
// pointers; a type that cannot hold it is an error, as in gob.
func (d *decoder) value(b *buf, id int, v reflect.Value) error {
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		v = v.Elem()
	}
	mismatch := func() error {
		return fmt.Errorf("gob: cannot decode type id %d into %s", id, v.Type())
	}
	switch id {
	case tBool:
		if v.Kind() != reflect.Bool {
			return mismatch()
		}
		v.SetBool(b.uint() != 0)
		return nil
	case tInt:
		switch v.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			i := b.int()
			if v.OverflowInt(i) {
				return fmt.Errorf("gob: value %d overflows %s", i, v.Type())
			}
			v.SetInt(i)
			return nil
		}
		return mismatch()
	case tUint:
		switch v.Kind() {
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
			u := b.uint()
			if v.OverflowUint(u) {
				return fmt.Errorf("gob: value %d overflows %s", u, v.Type())
			}
			v.SetUint(u)
			return nil
		}
		return mismatch()
	case tFloat:
		if v.Kind() != reflect.Float32 && v.Kind() != reflect.Float64 {
			return mismatch()
		}
		v.SetFloat(math.Float64frombits(bits.ReverseBytes64(b.uint())))
		return nil
	case tString:
		if v.Kind() != reflect.String {
			return mismatch()
		}
		v.SetString(string(b.bytes()))
		return nil
	case tBytes:
		if v.Kind() != reflect.Slice || v.Type().Elem().Kind() != reflect.Uint8 {
			return mismatch()
		}
		v.SetBytes(append([]byte(nil), b.bytes()...))
		return nil
	}
	w := d.typ(id)
	if w == nil {
		return fmt.Errorf("gob: value of undefined type id %d", id)
	}
	switch {
	case w.kind == wireStruct && v.Kind() == reflect.Struct:
		field := -1
		for b.err == nil && len(b.b) > 0 { // gob ends a struct at its 0 or at the message's end
			delta := b.uint()
			if delta == 0 {
				break
			}
			field += int(delta)
			if field < 0 || field >= len(w.fields) {
				return fmt.Errorf("gob: field %d of type id %d out of range", field, id)
			}
			wf := w.fields[field]
			sf, ok := v.Type().FieldByName(wf.name)
			if !ok || !sf.IsExported() {
				if err := d.skip(b, wf.id, 0); err != nil {
					return err
				}
				continue
			}
			if err := d.value(b, wf.id, v.FieldByIndex(sf.Index)); err != nil {
				return err
			}
		}
		return b.err
	case w.kind == wireSlice && v.Kind() == reflect.Slice:
		n := b.count()
		if v.Cap() < n { // as gob: a nil slice stays nil when n is 0
			v.Set(reflect.MakeSlice(v.Type(), n, n))
		} else {
			v.SetLen(n)
		}
		for i := 0; i < n && b.err == nil; i++ {
			if err := d.value(b, w.elem, v.Index(i)); err != nil {
				return err
			}
		}
		return b.err
	}
	return mismatch()
}

// maxDepth bounds the nesting of skipped values (a definition may refer
// to itself).
const maxDepth = 100

// skip reads past a value of type id.
func (d *decoder) skip(b *buf, id, depth int) error {
	if depth > maxDepth {
		return errors.New("gob: value nested too deeply")
	}
	switch id {
	case tBool, tInt, tUint, tFloat:
		b.uint()
		return b.err
	case tComplex:
		b.uint()
		b.uint()
		return b.err
	case tBytes, tString:
		b.bytes()
		return b.err
	case tInterface:
		return errors.New("gob: interface values are not supported")
	}
	w := d.typ(id)
	if w == nil {
		return fmt.Errorf("gob: value of undefined type id %d", id)
	}
	switch w.kind {
	case wireStruct:
		field := -1
		for b.err == nil && len(b.b) > 0 { // gob ends a struct at its 0 or at the message's end
			delta := b.uint()
			if delta == 0 {
				break
			}
			field += int(delta)
			if field < 0 || field >= len(w.fields) {
				return fmt.Errorf("gob: field %d of type id %d out of range", field, id)
			}
			if err := d.skip(b, w.fields[field].id, depth+1); err != nil {
				return err
			}
		}
	case wireSlice, wireArray:
		for range b.count() {
			if err := d.skip(b, w.elem, depth+1); err != nil {
				return err
			}
		}
	case wireMap:
		for range b.count() {
			if err := d.skip(b, w.key, depth+1); err != nil {
				return err
			}
			if err := d.skip(b, w.elem, depth+1); err != nil {
				return err
			}
		}
	case wireMarshaled:
		b.bytes()
	default: // an empty definition: gob cannot skip it either
		return fmt.Errorf("gob: value of undefined type id %d", id)
	}
	return b.err
}

// buf reads the parts of one message; the first error sticks and later
// reads return zeros.
type buf struct {
	b   []byte
	err error
}

func (b *buf) fail(format string, args ...any) {
	if b.err == nil {
		b.err = fmt.Errorf(format, args...)
	}
}

func (b *buf) uint() uint64 {
	if b.err != nil {
		return 0
	}
	if len(b.b) == 0 {
		b.fail("gob: message ends early")
		return 0
	}
	c := b.b[0]
	b.b = b.b[1:]
	if c < 0x80 {
		return uint64(c)
	}
	n := -int(int8(c))
	if n > 8 || n > len(b.b) {
		b.fail("gob: malformed integer")
		return 0
	}
	var x uint64
	for _, c := range b.b[:n] {
		x = x<<8 | uint64(c)
	}
	b.b = b.b[n:]
	return x
}

func (b *buf) int() int64 {
	u := b.uint()
	if u&1 != 0 {
		return ^int64(u >> 1)
	}
	return int64(u >> 1)
}

// count reads a length that the rest of the message must be able to
// hold (each element takes at least a byte).
func (b *buf) count() int {
	n := b.uint()
	if n > uint64(len(b.b)) {
		b.fail("gob: length %d beyond the message", n)
		return 0
	}
	return int(n)
}

func (b *buf) bytes() []byte {
	n := b.count()
	if b.err != nil {
		return nil
	}
	s := b.b[:n]
	b.b = b.b[n:]
	return s
}

func (b *buf) string() string { return string(b.bytes()) }

// fields reads a struct's (field delta, value) pairs up to the
// terminating 0 or the end of the message, calling fn with each field
// number to read its value.
func (b *buf) fields(fn func(field int)) {
	field := -1
	for b.err == nil && len(b.b) > 0 {
		delta := b.uint()
		if delta == 0 || b.err != nil {
			return
		}
		field += int(delta)
		fn(field)
	}
}
