package api

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestCompatibilityTableMatchesRegistry keeps docs/compatibility.md honest:
// its table of API keys lists exactly the registered keys, with their names
// and version ranges.
func TestCompatibilityTableMatchesRegistry(t *testing.T) {
	doc, err := os.ReadFile("../../docs/compatibility.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile(`(?m)^\| (\d+) \| (\w+) \| (\d+)(?:–(\d+))? \|`)
	documented := map[int16]bool{}
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		key, _ := strconv.Atoi(m[1])
		lo, _ := strconv.Atoi(m[3])
		hi := lo
		if m[4] != "" {
			hi, _ = strconv.Atoi(m[4])
		}
		k := servedKey(int16(key))
		switch {
		case k == nil:
			t.Errorf("docs/compatibility.md lists key %d (%s), which is not registered", key, m[2])
			continue
		case !strings.EqualFold(m[2], kmsg.NameForKey(int16(key))): // Kafka writes InitProducerId
			t.Errorf("docs/compatibility.md names key %d %s, kmsg calls it %s", key, m[2], kmsg.NameForKey(int16(key)))
		case int16(lo) != k.minVersion || int16(hi) != k.maxVersion:
			t.Errorf("docs/compatibility.md: %s versions %d–%d, registered %d–%d", m[2], lo, hi, k.minVersion, k.maxVersion)
		}
		documented[int16(key)] = true
	}
	for key, k := range apiKeys {
		if k != nil && !documented[int16(key)] {
			t.Errorf("key %d (%s) is registered but missing from docs/compatibility.md", key, kmsg.NameForKey(int16(key)))
		}
	}
}
