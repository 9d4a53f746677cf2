package privtest

import (
	"regexp"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// WithoutKernelReasons is s without the explanations the kernel gives with
// its errors: every netlink socket asks for them and our error texts keep
// them after the errno's text (see package nlerr), "file exists (ipv4:
// Address already assigned)", but their wording changes between kernel
// versions, and some kernels give none. Tests that pin a message, most of
// them the reference's wording, compare it without them.
func WithoutKernelReasons(s string) string { return kernelReason().ReplaceAllString(s, "$1") }

// kernelReason matches an errno's text followed by " (<explanation>)".
var kernelReason = sync.OnceValue(func() *regexp.Regexp {
	var texts []string
	for e := unix.Errno(1); e < 256; e++ {
		if t := e.Error(); !strings.HasPrefix(t, "errno ") {
			texts = append(texts, regexp.QuoteMeta(t))
		}
	}
	return regexp.MustCompile(`(` + strings.Join(texts, "|") + `) \([^()]*\)`)
})
