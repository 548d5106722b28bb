package goconst

import (
	"maps"
	"os"
	"testing"
	"testing/fstest"
)

func TestStrings(t *testing.T) {
	dir := t.TempDir()
	write := func(files fstest.MapFS) {
		if err := os.CopyFS(dir, files); err != nil {
			t.Fatal(err)
		}
	}
	write(fstest.MapFS{
		"a.go":      {Data: []byte("package p\n\nconst (\n\tReasonA = \"A\"\n\tReasonB, Other = `B`, \"o\"\n\tReasonN = 3\n\tReasonTyped Kind = \"T\"\n)\n\ntype Kind string\n\nvar ReasonV = \"V\"\n")},
		"a_test.go": {Data: []byte("package p\n\nconst ReasonTest = \"test\"\n")},
	})
	got, err := Strings(dir, "Reason")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"ReasonA": "A", "ReasonB": "B", "ReasonTyped": "T", "ReasonV": "V"}
	if !maps.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	write(fstest.MapFS{"bad.go": {Data: []byte("package p\n\nconst (\n")}})
	if _, err := Strings(dir, "Reason"); err == nil {
		t.Error("a file that does not parse: no error")
	}
}
