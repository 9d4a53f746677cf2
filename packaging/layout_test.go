package main

import "testing"

func TestPackageVersions(t *testing.T) {
	for _, tc := range []struct {
		in            string
		deb, rpm, apk string
		bad           bool
	}{
		{in: "1.2.3", deb: "1.2.3", rpm: "1.2.3", apk: "1.2.3"},
		{in: "1.2.3+4.gabcdef0", deb: "1.2.3+4.gabcdef0", rpm: "1.2.3+4.gabcdef0", apk: "1.2.3_p4"},
		{in: "0.0.0~git20261128143910.e90683a", deb: "0.0.0~git20261128143910.e90683a", rpm: "0.0.0~git20261128143910.e90683a", apk: "0.0.0_git20261128143910"},
		{in: "v1.2.3", bad: true},
		{in: "1.2.3~rc1", bad: true},
	} {
		v, err := packageVersions(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("%q: no error", tc.in)
			}
			continue
		}
		if err != nil || v != (versions{tc.deb, tc.rpm, tc.apk}) {
			t.Errorf("%q: %+v, %v", tc.in, v, err)
		}
	}
}

// The next version of an untagged build sorts after it for dpkg.
func TestNextVersion(t *testing.T) {
	for in, want := range map[string]string{
		"0.0.0~git20261128235959.e90683a": "0.0.0~git20261129000000.e90683a",
		"1.2.3":                           "1.2.3+1.gupgrade",
		"1.2.3+4.gabcdef0":                "1.2.3+4.gabcdef0.1",
	} {
		if got := nextVersion(in); got != want {
			t.Errorf("nextVersion(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRelations(t *testing.T) {
	for _, f := range flavours() {
		r := f.relations("1.9.1", "2.0.0")
		if len(r.provides) == 0 {
			t.Errorf("%s %s provides nothing", f.format, f.name)
		}
		for _, d := range r.depends {
			if d == "iptables" {
				t.Errorf("%s %s depends on iptables", f.format, f.name)
			}
		}
	}
}
