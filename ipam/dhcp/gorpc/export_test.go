package gorpc

import (
	"bufio"
	"io"
)

// Encoder and Decoder expose the gob stream to the tests, which compare
// it with encoding/gob.
type Encoder struct {
	e *encoder
	w *bufio.Writer
}

func NewEncoder(w io.Writer) *Encoder {
	bw := bufio.NewWriter(w)
	return &Encoder{e: newEncoder(bw), w: bw}
}

func (e *Encoder) Encode(v any) error {
	if err := e.e.Encode(v); err != nil {
		return err
	}
	return e.w.Flush()
}

type Decoder struct{ d *decoder }

func NewDecoder(r io.Reader) *Decoder { return &Decoder{newDecoder(bufio.NewReader(r))} }

func (d *Decoder) Decode(v any) error { return d.d.Decode(v) }
