package xz

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The files in testdata were made once with xz-utils 5.4 from inputs
// whose SHA-256 the table records:
//
//	x86-bcj.xz            the first 64 KiB of a static x86-64 binary, --x86 --lzma2=preset=9
//	random-crc32.xz       20000 random bytes: stored (uncompressed) LZMA2 chunks
//	text-lp2-nocheck.xz   3.4 MiB of repetitive text, lc=0 lp=2 pb=0, no check: several chunks
//	empty.xz              nothing
func TestDecode(t *testing.T) {
	tests := []struct {
		file   string
		size   int
		sha256 string
	}{
		{"x86-bcj.xz", 65536, "49b9925eb3847bfcc1c8cb6a35e28ed5ef5cf9fd7e7a974f0a458b6d6785ee99"},
		{"random-crc32.xz", 20000, "f6f48e1d5356f242cc6cec0796728e292f35bd92e072e252cfe5cbcd49678aad"},
		{"text-lp2-nocheck.xz", 3591720, "8bed394e1999ae19a75ffb966432f5aada551a47e0867135ee09cd0bf1ec1427"},
		{"empty.xz", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			in, err := os.ReadFile(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			out, err := Decode(in)
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(out)
			if len(out) != tt.size || hex.EncodeToString(sum[:]) != tt.sha256 {
				t.Errorf("got %d bytes, sha256 %x; want %d bytes, %s", len(out), sum, tt.size, tt.sha256)
			}
		})
	}
}

// TestDecodeCorrupt: damage anywhere is an error, never a panic or wrong
// data passed off as right.
func TestDecodeCorrupt(t *testing.T) {
	good, err := os.ReadFile("testdata/x86-bcj.xz")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		data func() []byte
		want string
	}{
		{"not xz", func() []byte { return []byte("hello, world") }, "not an xz stream"},
		{"header CRC", func() []byte { return flip(good, 8) }, "stream header CRC"},
		{"block header CRC", func() []byte { return flip(good, 13) }, "block header CRC"},
		{"truncated", func() []byte { return good[:len(good)/2] }, ""},
		{"flipped payload bit", func() []byte { return flip(good, len(good)/2) }, ""},
		{"data CRC", func() []byte { return flip(good, len(good)-40) }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode(tt.data())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func flip(b []byte, i int) []byte {
	c := append([]byte(nil), b...)
	c[i] ^= 0x10
	return c
}

// FuzzDecode: arbitrary input never panics.
func FuzzDecode(f *testing.F) {
	for _, name := range []string{"x86-bcj.xz", "random-crc32.xz", "text-lp2-nocheck.xz"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b[:min(len(b), 4096)])
	}
	f.Fuzz(func(t *testing.T, b []byte) { _, _ = Decode(b) })
}
