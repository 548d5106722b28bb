package goconst

import (
	"maps"
	"os"
	"path/filepath"
	"testing"
)

func TestStrings(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("a.go", "package p\n\nconst (\n\tReasonA = \"A\"\n\tReasonB, Other = `B`, \"o\"\n\tReasonN = 3\n\tReasonTyped Kind = \"T\"\n)\n\ntype Kind string\n\nvar ReasonV = \"V\"\n")
	write("a_test.go", "package p\n\nconst ReasonTest = \"test\"\n")
	got, err := Strings(dir, "Reason")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"ReasonA": "A", "ReasonB": "B", "ReasonTyped": "T", "ReasonV": "V"}
	if !maps.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	write("bad.go", "package p\n\nconst (\n")
	if _, err := Strings(dir, "Reason"); err == nil {
		t.Error("a file that does not parse: no error")
	}
}
