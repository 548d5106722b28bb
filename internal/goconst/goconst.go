// Package goconst reads the string constants of a Go package's source, for tests that
// check every constant of one kind (condition reasons, drop reasons) is documented or
// alerted on, so that one added later cannot be missed.
package goconst

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
)

// Strings returns, by name, the values of the names starting with prefix that the
// non-test .go files of dir declare with a string literal (const or var; a name given
// no literal value is passed over). Errors: a file that cannot be read or parsed.
func Strings(dir, prefix string) (map[string]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(token.NewFileSet(), f, nil, 0)
		if err != nil {
			return nil, err
		}
		ast.Inspect(file, func(n ast.Node) bool {
			if vs, ok := n.(*ast.ValueSpec); ok {
				addStrings(out, vs, prefix)
			}
			return true
		})
	}
	return out, nil
}

// addStrings adds vs's names starting with prefix that have a string literal value.
func addStrings(out map[string]string, vs *ast.ValueSpec, prefix string) {
	for i, name := range vs.Names {
		if !strings.HasPrefix(name.Name, prefix) || i >= len(vs.Values) {
			continue
		}
		if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if v, err := strconv.Unquote(lit.Value); err == nil {
				out[name.Name] = v
			}
		}
	}
}
