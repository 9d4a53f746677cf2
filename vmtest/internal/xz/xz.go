// Package xz decompresses the .xz streams Linux kernel images carry (LZMA2,
// optionally behind the x86 BCJ filter), in memory.
//
// Debian compresses its x86 kernels with xz; decompressing the image in
// the guest costs about seven seconds under qemu's TCG, decompressing it
// on the host well under one. The standard library has no xz, and this
// single use does not justify a dependency, so this is a small,
// single-call decoder: no streaming, one stream, the formats xz writes
// for kernels. The stream's integrity check (CRC32 or none) is verified,
// so a decoder bug cannot go unnoticed.
package xz

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

var magic = []byte{0xFD, '7', 'z', 'X', 'Z', 0x00}

const (
	checkNone  = 0
	checkCRC32 = 1

	filterX86   = 0x04
	filterLZMA2 = 0x21
)

// IsXZ reports whether data starts with the .xz magic.
func IsXZ(data []byte) bool { return bytes.HasPrefix(data, magic) }

// Decode decompresses the first block of the .xz stream at the start of
// data and checks its integrity check. Bytes after that block (the index,
// the footer, whatever follows the stream) are not looked at: a kernel
// image is one block.
func Decode(data []byte) ([]byte, error) {
	if len(data) < 12 || !IsXZ(data) {
		return nil, errors.New("xz: not an xz stream")
	}
	flags := data[6:8]
	if crc32.ChecksumIEEE(flags) != binary.LittleEndian.Uint32(data[8:12]) {
		return nil, errors.New("xz: stream header CRC mismatch")
	}
	check := flags[1] & 0x0F
	if flags[0] != 0 || (check != checkNone && check != checkCRC32) {
		return nil, fmt.Errorf("xz: unsupported stream flags %#x %#x (only CRC32 or no check)", flags[0], flags[1])
	}
	p := data[12:]
	if len(p) == 0 {
		return nil, errors.New("xz: truncated stream")
	}
	if p[0] == 0 { // the index right away: no block, empty data
		return []byte{}, nil
	}
	hsize := (int(p[0]) + 1) * 4
	if len(p) < hsize {
		return nil, errors.New("xz: truncated block header")
	}
	hdr := p[:hsize]
	if crc32.ChecksumIEEE(hdr[:hsize-4]) != binary.LittleEndian.Uint32(hdr[hsize-4:]) {
		return nil, errors.New("xz: block header CRC mismatch")
	}
	bx86, err := parseBlockHeader(hdr[1 : hsize-4])
	if err != nil {
		return nil, err
	}
	out, used, err := decodeLZMA2(p[hsize:])
	if err != nil {
		return nil, err
	}
	if bx86 {
		x86Decode(out)
	}
	if check == checkCRC32 {
		rest := p[hsize+used:]
		pad := (4 - used%4) % 4
		if len(rest) < pad+4 {
			return nil, errors.New("xz: truncated block check")
		}
		if crc32.ChecksumIEEE(out) != binary.LittleEndian.Uint32(rest[pad:]) {
			return nil, errors.New("xz: CRC32 of the decompressed data does not match (decoder bug or corrupt file)")
		}
	}
	return out, nil
}

// parseBlockHeader accepts the filter chains [LZMA2] and [x86, LZMA2]. The
// dictionary size does not matter: the whole output is the dictionary.
func parseBlockHeader(h []byte) (x86 bool, err error) {
	flags := h[0]
	h = h[1:]
	if flags&0x3C != 0 {
		return false, errors.New("xz: reserved block flags set")
	}
	for _, present := range []bool{flags&0x40 != 0, flags&0x80 != 0} { // compressed, uncompressed size
		if present {
			if _, h, err = uvarint(h); err != nil {
				return false, err
			}
		}
	}
	nfilters := int(flags&3) + 1
	for i := range nfilters {
		var id, psize uint64
		if id, h, err = uvarint(h); err != nil {
			return false, err
		}
		if psize, h, err = uvarint(h); err != nil {
			return false, err
		}
		if uint64(len(h)) < psize {
			return false, errors.New("xz: truncated filter properties")
		}
		props := h[:psize]
		h = h[psize:]
		last := i == nfilters-1
		switch {
		case id == filterX86 && !last && (psize == 0 || (psize == 4 && binary.LittleEndian.Uint32(props) == 0)):
			x86 = true
		case id == filterLZMA2 && last && psize == 1 && props[0] <= 40:
		default:
			return false, fmt.Errorf("xz: unsupported filter %#x (only x86 BCJ and LZMA2)", id)
		}
	}
	return x86, nil
}

func uvarint(b []byte) (uint64, []byte, error) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, nil, errors.New("xz: bad number in block header")
	}
	return v, b[n:], nil
}

// decodeLZMA2 decodes an LZMA2 stream up to its end marker and returns the
// output and the number of input bytes used.
func decodeLZMA2(in []byte) ([]byte, int, error) {
	var (
		out       []byte
		s         lzmaState
		dictStart int
		pos       int
		needDict  = true
		needProps = true
	)
	for {
		if pos >= len(in) {
			return nil, 0, errors.New("xz: truncated LZMA2 stream")
		}
		c := in[pos]
		pos++
		switch {
		case c == 0x00:
			return out, pos, nil
		case c == 0x01 || c == 0x02:
			if pos+2 > len(in) {
				return nil, 0, errCorrupt
			}
			n := int(binary.BigEndian.Uint16(in[pos:])) + 1
			pos += 2
			if pos+n > len(in) || (c == 0x02 && needDict) {
				return nil, 0, errCorrupt
			}
			if c == 0x01 {
				dictStart, needDict = len(out), false
			}
			out = append(out, in[pos:pos+n]...)
			pos += n
		case c >= 0x80:
			if pos+4 > len(in) {
				return nil, 0, errCorrupt
			}
			usize := int(c&0x1F)<<16 + int(binary.BigEndian.Uint16(in[pos:])) + 1
			csize := int(binary.BigEndian.Uint16(in[pos+2:])) + 1
			pos += 4
			reset := c >> 5 & 3
			if reset == 3 {
				dictStart, needDict = len(out), false
			} else if needDict {
				return nil, 0, errCorrupt
			}
			if reset >= 2 {
				if pos >= len(in) {
					return nil, 0, errCorrupt
				}
				if err := s.setProps(in[pos]); err != nil {
					return nil, 0, err
				}
				pos++
				needProps = false
			} else if needProps {
				return nil, 0, errCorrupt
			}
			if reset >= 1 {
				s.reset()
			}
			if pos+csize > len(in) {
				return nil, 0, errCorrupt
			}
			if out == nil {
				// Trust the headers only within a plausible ratio.
				out = make([]byte, 0, min(lzma2Size(in), 32*len(in)))
			}
			if err := s.decodeChunk(&out, dictStart, in[pos:pos+csize], usize); err != nil {
				return nil, 0, err
			}
			pos += csize
		default:
			return nil, 0, fmt.Errorf("%w: control byte %#x", errCorrupt, c)
		}
	}
}

// lzma2Size adds up the uncompressed sizes in the chunk headers, so the
// output is allocated once; on malformed input it stops early, and
// decoding reports the error.
func lzma2Size(in []byte) int {
	total, pos := 0, 0
	for pos < len(in) {
		c := in[pos]
		switch {
		case c == 0x01 || c == 0x02:
			if pos+3 > len(in) {
				return total
			}
			n := int(binary.BigEndian.Uint16(in[pos+1:])) + 1
			total += n
			pos += 3 + n
		case c >= 0x80:
			if pos+5 > len(in) {
				return total
			}
			total += int(c&0x1F)<<16 + int(binary.BigEndian.Uint16(in[pos+1:])) + 1
			pos += 5 + int(binary.BigEndian.Uint16(in[pos+3:])) + 1
			if c>>5&3 >= 2 {
				pos++
			}
		default:
			return total
		}
	}
	return total
}

// x86Decode undoes the x86 BCJ filter over the whole buffer in place: the
// encoder turned the relative targets of CALL (E8) and JMP (E9) into
// absolute ones, which compress better.
func x86Decode(buf []byte) {
	allowed := [8]bool{true, true, true, false, true, false, false, false}
	bitNumber := [8]uint32{0, 1, 2, 2, 3, 3, 3, 3}
	msByte := func(b byte) bool { return b == 0 || b == 0xFF }

	var prevMask uint32
	prevPos := ^uint32(4) // -5: no previous E8/E9 in reach
	if len(buf) < 5 {
		return
	}
	limit := len(buf) - 5
	for i := 0; i <= limit; {
		b := buf[i]
		if b != 0xE8 && b != 0xE9 {
			i++
			continue
		}
		off := uint32(i) - prevPos
		prevPos = uint32(i)
		if off > 5 {
			prevMask = 0
		} else {
			for range off {
				prevMask &= 0x77
				prevMask <<= 1
			}
		}
		b = buf[i+4]
		if msByte(b) && allowed[prevMask>>1&7] && prevMask>>1 < 0x10 {
			src := binary.LittleEndian.Uint32(buf[i+1:])
			var dest uint32
			for {
				dest = src - uint32(i+5)
				if prevMask == 0 {
					break
				}
				n := bitNumber[prevMask>>1]
				if !msByte(byte(dest >> (24 - n*8))) {
					break
				}
				src = dest ^ (1<<(32-n*8) - 1)
			}
			dest &= 0x01FFFFFF
			if dest&0x01000000 != 0 {
				dest |= 0xFF000000
			}
			binary.LittleEndian.PutUint32(buf[i+1:], dest)
			i += 5
			prevMask = 0
		} else {
			i++
			prevMask |= 1
			if msByte(b) {
				prevMask |= 0x10
			}
		}
	}
}
