package updater

import (
	"encoding/json"
	"errors"
	"testing"

	"gomodules.xyz/jsonpatch/v2"
)

func TestApplyAnnotationOps(t *testing.T) {
	raw := func(s string) json.RawMessage { return json.RawMessage(`"` + s + `"`) }
	got, err := applyAnnotationOps(map[string]string{"keep": "1", "gpufrac.io/gpu-memory": "3Gi", "old": "x"}, []jsonpatch.JsonPatchOperation{
		jsonpatch.NewOperation("add", "/metadata/annotations/gpufrac.io~1gpu-memory", raw("1Gi")),
		jsonpatch.NewOperation("add", "/metadata/annotations/a~0b", raw("tilde")),
		jsonpatch.NewOperation("remove", "/metadata/annotations/old", nil),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got["keep"] != "1" || got["gpufrac.io/gpu-memory"] != "1Gi" || got["a~b"] != "tilde" {
		t.Fatalf("annotations %v", got)
	}
	got, err = applyAnnotationOps(nil, []jsonpatch.JsonPatchOperation{jsonpatch.NewOperation("add", "/metadata/annotations", map[string]string{"k": "v"})})
	if err != nil || got["k"] != "v" {
		t.Fatalf("whole map: %v %v", got, err)
	}
	for _, op := range []jsonpatch.JsonPatchOperation{
		jsonpatch.NewOperation("add", "/spec/containers/0/env", []string{}),
		jsonpatch.NewOperation("add", "/spec/schedulerName", raw("kai-scheduler")),
		jsonpatch.NewOperation("add", "/metadata/labels/q", raw("x")),
	} {
		if _, err := applyAnnotationOps(nil, []jsonpatch.JsonPatchOperation{op}); !errors.Is(err, ErrNotInPlace) {
			t.Errorf("%s: error %v, want ErrNotInPlace", op.Path, err)
		}
	}
}
