// Package hostile holds tests only: hostile input (path-like names, bad
// interface names, huge configs, symlinks planted in the host-local
// store) fed to the plugins through the real dispatcher, checking each is
// refused with the reference's error code and a message naming the field,
// and that nothing was changed (issue 7, part 4). The per-plugin config
// checks live with each plugin (plugins/*/config_test.go).
package hostile
