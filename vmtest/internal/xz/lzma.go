package xz

import (
	"errors"
	"fmt"
)

// The LZMA decoder of LZMA2 chunks, written for one job: decompressing
// a kernel image held entirely in memory, so the whole output is the
// dictionary and nothing is streamed.

const (
	numStates       = 12
	posStatesMax    = 1 << 4
	lenToPosStates  = 4
	endPosModelIdx  = 14
	numFullDistance = 1 << (endPosModelIdx >> 1)
	numAlignBits    = 4
	probInit        = 1 << 10
	minMatchLen     = 2
)

var errCorrupt = errors.New("xz: corrupt LZMA2 data")

// rangeDecoder is LZMA's binary arithmetic decoder over one chunk.
type rangeDecoder struct {
	in   []byte
	pos  int
	rng  uint32
	code uint32
}

func (r *rangeDecoder) init(in []byte) error {
	if len(in) < 5 || in[0] != 0 {
		return errCorrupt
	}
	r.in, r.pos, r.rng = in, 5, 0xFFFFFFFF
	r.code = uint32(in[1])<<24 | uint32(in[2])<<16 | uint32(in[3])<<8 | uint32(in[4])
	return nil
}

func (r *rangeDecoder) normalize() {
	if r.rng < 1<<24 {
		r.rng <<= 8
		r.code <<= 8
		if r.pos < len(r.in) {
			r.code |= uint32(r.in[r.pos])
		}
		r.pos++ // past the end: caught after the chunk
	}
}

func (r *rangeDecoder) bit(p *uint16) uint32 {
	bound := (r.rng >> 11) * uint32(*p)
	var b uint32
	if r.code < bound {
		r.rng = bound
		*p += (1<<11 - *p) >> 5
	} else {
		r.rng -= bound
		r.code -= bound
		*p -= *p >> 5
		b = 1
	}
	r.normalize()
	return b
}

// tree decodes n bits, most significant first, with probs[1:1<<n].
func (r *rangeDecoder) tree(probs []uint16, n int) uint32 {
	m := uint32(1)
	for range n {
		m = m<<1 | r.bit(&probs[m])
	}
	return m - 1<<n
}

// reverse decodes n bits, least significant first, with probs[1:1<<n].
func (r *rangeDecoder) reverse(probs []uint16, n int) uint32 {
	m, v := uint32(1), uint32(0)
	for i := range n {
		b := r.bit(&probs[m])
		m = m<<1 | b
		v |= b << i
	}
	return v
}

// direct decodes n bits with fixed probability one half.
func (r *rangeDecoder) direct(n int) uint32 {
	var v uint32
	for range n {
		r.rng >>= 1
		b := uint32(0)
		if r.code >= r.rng {
			r.code -= r.rng
			b = 1
		}
		v = v<<1 | b
		r.normalize()
	}
	return v
}

type lenDecoder struct {
	choice, choice2 uint16
	low, mid        [posStatesMax][1 << 3]uint16
	high            [1 << 8]uint16
}

func (l *lenDecoder) reset() {
	l.choice, l.choice2 = probInit, probInit
	for i := range l.low {
		fill(l.low[i][:])
		fill(l.mid[i][:])
	}
	fill(l.high[:])
}

func (l *lenDecoder) decode(r *rangeDecoder, posState uint32) uint32 {
	if r.bit(&l.choice) == 0 {
		return r.tree(l.low[posState][:], 3)
	}
	if r.bit(&l.choice2) == 0 {
		return 8 + r.tree(l.mid[posState][:], 3)
	}
	return 16 + r.tree(l.high[:], 8)
}

func fill(p []uint16) {
	for i := range p {
		p[i] = probInit
	}
}

// lzmaState is what survives from one LZMA2 chunk to the next unless a
// chunk resets it.
type lzmaState struct {
	lc, lp, pb   uint32
	literal      []uint16
	isMatch      [numStates][posStatesMax]uint16
	isRep        [numStates]uint16
	isRepG0      [numStates]uint16
	isRepG1      [numStates]uint16
	isRepG2      [numStates]uint16
	isRep0Long   [numStates][posStatesMax]uint16
	posSlot      [lenToPosStates][1 << 6]uint16
	posSpecial   [1 + numFullDistance - endPosModelIdx]uint16
	align        [1 << numAlignBits]uint16
	matchLen     lenDecoder
	repLen       lenDecoder
	state        uint32
	rep          [4]uint32
	propsPresent bool
}

// setProps takes the lc/lp/pb byte of an LZMA2 chunk.
func (s *lzmaState) setProps(b byte) error {
	if b >= 9*5*5 {
		return errCorrupt
	}
	s.lc, s.lp, s.pb = uint32(b%9), uint32(b/9%5), uint32(b/45)
	if s.lc+s.lp > 4 {
		return errCorrupt
	}
	s.propsPresent = true
	return nil
}

func (s *lzmaState) reset() {
	n := 0x300 << (s.lc + s.lp)
	if cap(s.literal) < n {
		s.literal = make([]uint16, n)
	}
	s.literal = s.literal[:n]
	fill(s.literal)
	for i := range numStates {
		fill(s.isMatch[i][:])
		fill(s.isRep0Long[i][:])
	}
	fill(s.isRep[:])
	fill(s.isRepG0[:])
	fill(s.isRepG1[:])
	fill(s.isRepG2[:])
	for i := range s.posSlot {
		fill(s.posSlot[i][:])
	}
	fill(s.posSpecial[:])
	fill(s.align[:])
	s.matchLen.reset()
	s.repLen.reset()
	s.state = 0
	s.rep = [4]uint32{}
}

// decodeChunk appends exactly size bytes decoded from in to *out; dictStart
// is where the current dictionary begins in *out.
func (s *lzmaState) decodeChunk(out *[]byte, dictStart int, in []byte, size int) error {
	var r rangeDecoder
	if err := r.init(in); err != nil {
		return err
	}
	buf := *out
	end := len(buf) + size
	pbMask := uint32(1)<<s.pb - 1
	lpMask := uint32(1)<<s.lp - 1
	state, rep := s.state, s.rep
	for len(buf) < end {
		pos := uint32(len(buf) - dictStart)
		posState := pos & pbMask
		if r.bit(&s.isMatch[state][posState]) == 0 {
			var prev uint32
			if pos > 0 {
				prev = uint32(buf[len(buf)-1])
			}
			litState := (pos&lpMask)<<s.lc + prev>>(8-s.lc)
			probs := s.literal[0x300*litState : 0x300*(litState+1)]
			sym := uint32(1)
			if state >= 7 {
				if rep[0] >= pos {
					return errCorrupt
				}
				match := uint32(buf[len(buf)-1-int(rep[0])])
				for sym < 0x100 {
					mb := match >> 7 & 1
					match <<= 1
					b := r.bit(&probs[0x100+mb<<8+sym])
					sym = sym<<1 | b
					if mb != b {
						break
					}
				}
			}
			for sym < 0x100 {
				sym = sym<<1 | r.bit(&probs[sym])
			}
			buf = append(buf, byte(sym))
			switch {
			case state < 4:
				state = 0
			case state < 10:
				state -= 3
			default:
				state -= 6
			}
			continue
		}
		var n uint32
		if r.bit(&s.isRep[state]) == 0 {
			rep[3], rep[2], rep[1] = rep[2], rep[1], rep[0]
			n = s.matchLen.decode(&r, posState)
			if state < 7 {
				state = 7
			} else {
				state = 10
			}
			rep[0] = s.distance(&r, n)
			if rep[0] == 0xFFFFFFFF {
				return errCorrupt // end marker: not allowed in LZMA2
			}
		} else {
			if r.bit(&s.isRepG0[state]) == 0 {
				if r.bit(&s.isRep0Long[state][posState]) == 0 {
					if rep[0] >= pos {
						return errCorrupt
					}
					buf = append(buf, buf[len(buf)-1-int(rep[0])])
					if state < 7 {
						state = 9
					} else {
						state = 11
					}
					continue
				}
			} else {
				var d uint32
				if r.bit(&s.isRepG1[state]) == 0 {
					d = rep[1]
				} else {
					if r.bit(&s.isRepG2[state]) == 0 {
						d = rep[2]
					} else {
						d = rep[3]
						rep[3] = rep[2]
					}
					rep[2] = rep[1]
				}
				rep[1] = rep[0]
				rep[0] = d
			}
			n = s.repLen.decode(&r, posState)
			if state < 7 {
				state = 8
			} else {
				state = 11
			}
		}
		length := int(n) + minMatchLen
		if rep[0] >= pos || len(buf)+length > end {
			return errCorrupt
		}
		from := len(buf) - 1 - int(rep[0])
		if from+length <= len(buf) {
			buf = append(buf, buf[from:from+length]...)
		} else {
			for i := range length { // overlaps what it writes: byte by byte
				buf = append(buf, buf[from+i])
			}
		}
	}
	if r.pos != len(in) {
		return fmt.Errorf("%w: chunk used %d of %d compressed bytes", errCorrupt, r.pos, len(in))
	}
	*out = buf
	s.state, s.rep = state, rep
	return nil
}

// distance decodes the distance of a match of length index n.
func (s *lzmaState) distance(r *rangeDecoder, n uint32) uint32 {
	ls := min(n, lenToPosStates-1)
	slot := r.tree(s.posSlot[ls][:], 6)
	if slot < 4 {
		return slot
	}
	bits := int(slot>>1 - 1)
	d := (2 | slot&1) << bits
	if slot < endPosModelIdx {
		return d + r.reverse(s.posSpecial[d-slot:], bits)
	}
	d += r.direct(bits-numAlignBits) << numAlignBits
	return d + r.reverse(s.align[:], numAlignBits)
}
