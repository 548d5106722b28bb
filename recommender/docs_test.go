package recommender

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
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
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			file, err := parser.ParseFile(token.NewFileSet(), f, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(file, func(n ast.Node) bool {
				vs, ok := n.(*ast.ValueSpec)
				if !ok {
					return true
				}
				for i, name := range vs.Names {
					if !strings.HasPrefix(name.Name, "Reason") || i >= len(vs.Values) {
						continue
					}
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						v, _ := strconv.Unquote(lit.Value)
						reasons[name.Name] = v
					}
				}
				return true
			})
		}
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
