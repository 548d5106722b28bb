package recommender

import (
	"maps"
	"os"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/internal/goconst"
)

// Every condition reason the recommender writes (the Reason* string constants of
// api/v1alpha1 and of this package) is documented in docs/api.md.
func TestEveryConditionReasonIsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]string{}
	for _, dir := range []string{"../api/v1alpha1", "."} {
		found, err := goconst.Strings(dir, "Reason")
		if err != nil {
			t.Fatal(err)
		}
		maps.Copy(reasons, found)
	}
	if len(reasons) < 20 {
		t.Fatalf("found %d reasons: %v", len(reasons), reasons)
	}
	for name, v := range reasons {
		if !strings.Contains(string(doc), "`"+v+"`") {
			t.Errorf("%s (%q) is not in docs/api.md", name, v)
		}
	}
}
