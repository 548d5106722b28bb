package workload

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/rand"
)

// SafeAlphabet is apimachinery's: every byte value encodes into it, and it holds
// nothing rand.SafeEncodeString does not produce.
func TestSafeAlphabetIsKubernetes(t *testing.T) {
	all := make([]byte, 128) // ASCII: SafeEncodeString reads runes
	for i := range all {
		all[i] = byte(i)
	}
	got := rand.SafeEncodeString(string(all))
	seen := map[rune]bool{}
	for _, r := range got {
		if !strings.ContainsRune(SafeAlphabet, r) {
			t.Fatalf("rand.SafeEncodeString produced %q, not in SafeAlphabet", r)
		}
		seen[r] = true
	}
	if len(seen) != len(SafeAlphabet) {
		t.Errorf("rand.SafeEncodeString uses %d characters, SafeAlphabet has %d", len(seen), len(SafeAlphabet))
	}
}
