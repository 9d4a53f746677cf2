package vmtest

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
)

// cpioWriter writes the "newc" cpio format, the one the kernel unpacks as
// an initramfs. Entries carry uid/gid 0 and mtime 0, so an image depends
// only on what goes in. Parent directories are created on demand, in
// order, as the kernel's unpacker needs them to exist before their
// entries.
type cpioWriter struct {
	w    *bufio.Writer
	ino  uint32
	dirs map[string]bool
	err  error
}

func newCPIO(w io.Writer) *cpioWriter {
	return &cpioWriter{w: bufio.NewWriterSize(w, 1<<20), dirs: map[string]bool{"": true, ".": true}}
}

const (
	cpioDir     = 0o040000
	cpioFile    = 0o100000
	cpioSymlink = 0o120000
)

// header writes one entry's header and name; the data follows.
func (c *cpioWriter) header(name string, mode uint32, size int) {
	if c.err != nil {
		return
	}
	c.ino++
	_, c.err = fmt.Fprintf(c.w, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%s\x00",
		c.ino, mode, 0, 0, 1, 0, size, 0, 0, 0, 0, len(name)+1, 0, name)
	c.pad(110 + len(name) + 1)
}

func (c *cpioWriter) pad(n int) {
	if c.err == nil && n%4 != 0 {
		_, c.err = c.w.Write(make([]byte, 4-n%4))
	}
}

func clean(name string) string {
	return strings.TrimPrefix(path.Clean("/"+name), "/")
}

// Dir creates a directory and its missing parents.
func (c *cpioWriter) Dir(name string) {
	name = clean(name)
	if c.dirs[name] {
		return
	}
	c.Dir(path.Dir(name))
	c.dirs[name] = true
	c.header(name, cpioDir|0o755, 0)
}

// File writes a regular file.
func (c *cpioWriter) File(name string, perm os.FileMode, data []byte) {
	name = clean(name)
	c.Dir(path.Dir(name))
	c.header(name, cpioFile|uint32(perm.Perm()), len(data))
	if c.err == nil {
		_, c.err = c.w.Write(data)
	}
	c.pad(len(data))
}

// CopyFile writes the host file src as name, keeping its permissions.
func (c *cpioWriter) CopyFile(name, src string) {
	if c.err != nil {
		return
	}
	fi, err := os.Stat(src)
	if err != nil {
		c.err = err
		return
	}
	data, err := os.ReadFile(src)
	if err != nil {
		c.err = err
		return
	}
	c.File(name, fi.Mode(), data)
}

// Symlink writes a symbolic link name → target.
func (c *cpioWriter) Symlink(name, target string) {
	name = clean(name)
	c.Dir(path.Dir(name))
	c.header(name, cpioSymlink|0o777, len(target))
	if c.err == nil {
		_, c.err = c.w.WriteString(target)
	}
	c.pad(len(target))
}

// Close writes the trailer and flushes; it returns the first error.
func (c *cpioWriter) Close() error {
	c.header("TRAILER!!!", 0, 0)
	if c.err == nil {
		c.err = c.w.Flush()
	}
	return c.err
}
