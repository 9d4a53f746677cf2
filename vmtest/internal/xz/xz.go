// Package xz decompresses the .xz streams Linux kernel images and kernel
// modules carry, in memory, with github.com/ulikunitz/xz.
//
// Debian compresses its x86 kernels with xz behind the x86 BCJ filter;
// decompressing the image in the guest costs about seven seconds under
// qemu's TCG, on the host well under one. The library decodes LZMA2 but not
// the BCJ filter, so a stream whose block is [x86, LZMA2] has its headers
// read here, its LZMA2 data decoded by the library's raw LZMA2 reader, and
// the filter undone here (the few lines of x86Decode). Every other stream
// goes through the library's xz reader as it is. Either way the stream's
// integrity check is verified, so a decoding bug cannot go unnoticed.
package xz

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/ulikunitz/xz"
	"github.com/ulikunitz/xz/lzma"
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

// Decode decompresses the .xz stream at the start of data. Bytes after the
// stream are ignored: in a bzImage the kernel's build appends the
// uncompressed size to the payload.
func Decode(data []byte) ([]byte, error) {
	if len(data) < 12 || !IsXZ(data) {
		return nil, errors.New("xz: not an xz stream")
	}
	flags := data[6:8]
	if crc32.ChecksumIEEE(flags) != binary.LittleEndian.Uint32(data[8:12]) {
		return nil, errors.New("xz: stream header CRC mismatch")
	}
	p := data[12:]
	if len(p) == 0 {
		return nil, errors.New("xz: truncated stream")
	}
	if p[0] != 0 {
		hsize := (int(p[0]) + 1) * 4
		if len(p) < hsize {
			return nil, errors.New("xz: truncated block header")
		}
		hdr := p[:hsize]
		if crc32.ChecksumIEEE(hdr[:hsize-4]) != binary.LittleEndian.Uint32(hdr[hsize-4:]) {
			return nil, errors.New("xz: block header CRC mismatch")
		}
		x86, dictCap, err := parseBlockHeader(hdr[1 : hsize-4])
		if err != nil {
			return nil, err
		}
		if x86 {
			return decodeX86(flags[1]&0x0F, p[hsize:], dictCap)
		}
	}
	r, err := xz.ReaderConfig{SingleStream: true}.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("xz: %w", err)
	}
	out, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("xz: %w", err)
	}
	return out, nil
}

// decodeX86 decodes the first block of a stream whose filters are
// [x86, LZMA2]: LZMA2 by the library, then the BCJ filter undone, then the
// block's check (CRC32 or none) verified over the final bytes. A kernel
// image is one block; the index and footer are not looked at.
func decodeX86(check byte, block []byte, dictCap int) ([]byte, error) {
	if check != checkNone && check != checkCRC32 {
		return nil, fmt.Errorf("xz: unsupported check %d with the x86 filter (only CRC32 or none)", check)
	}
	in := bytes.NewReader(block)
	r, err := lzma.Reader2Config{DictCap: dictCap}.NewReader2(in)
	if err != nil {
		return nil, fmt.Errorf("xz: %w", err)
	}
	out, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("xz: %w", err)
	}
	x86Decode(out)
	if check == checkCRC32 {
		used := len(block) - in.Len()
		rest := block[used:]
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

// parseBlockHeader accepts the filter chains [LZMA2] and [x86, LZMA2] and
// returns whether the x86 filter is there and LZMA2's dictionary size.
func parseBlockHeader(h []byte) (x86 bool, dictCap int, err error) {
	flags := h[0]
	h = h[1:]
	if flags&0x3C != 0 {
		return false, 0, errors.New("xz: reserved block flags set")
	}
	for _, present := range []bool{flags&0x40 != 0, flags&0x80 != 0} { // compressed, uncompressed size
		if present {
			if _, h, err = uvarint(h); err != nil {
				return false, 0, err
			}
		}
	}
	nfilters := int(flags&3) + 1
	for i := range nfilters {
		var id, psize uint64
		if id, h, err = uvarint(h); err != nil {
			return false, 0, err
		}
		if psize, h, err = uvarint(h); err != nil {
			return false, 0, err
		}
		if uint64(len(h)) < psize {
			return false, 0, errors.New("xz: truncated filter properties")
		}
		props := h[:psize]
		h = h[psize:]
		last := i == nfilters-1
		switch {
		case id == filterX86 && !last && (psize == 0 || (psize == 4 && binary.LittleEndian.Uint32(props) == 0)):
			x86 = true
		case id == filterLZMA2 && last && psize == 1 && props[0] <= 40:
			dictCap = lzma2DictCap(props[0])
		default:
			return false, 0, fmt.Errorf("xz: unsupported filter %#x (only x86 BCJ and LZMA2)", id)
		}
	}
	return x86, dictCap, nil
}

// lzma2DictCap decodes LZMA2's one-byte dictionary size: 2 or 3 times a
// power of two, from 4 KiB; 40 is 4 GiB-1, capped here to what the
// library accepts.
func lzma2DictCap(b byte) int {
	if b == 40 {
		return int(lzma.MaxDictCap)
	}
	return int(2|uint64(b)&1) << (b/2 + 11)
}

func uvarint(b []byte) (uint64, []byte, error) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, nil, errors.New("xz: bad number in block header")
	}
	return v, b[n:], nil
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
