package llmretry_test

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadmeSnippetsAreCompiled checks that every Go snippet in README.md
// is code that an Example or a test compiles (and runs): each line of a
// ```go block, trimmed, with runs of spaces and tabs read as one space
// (gofmt aligns a literal's values and comments to its longest line), and
// with blank and comment-only lines skipped, must appear, in order, among
// the lines of one _test.go file of the repository (any module:
// example_test.go, interop's tests, …). A snippet that drifts from the
// code it shows fails here.
func TestReadmeSnippetsAreCompiled(t *testing.T) {
	if _, err := os.Stat(filepath.Join("interop", "go.mod")); err != nil {
		// A copy of the module alone (the module cache's) holds none of
		// the nested modules' tests that compile some of the snippets.
		t.Skip("not in the repository's checkout:", err)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	snippets := goBlocks(string(readme))
	if len(snippets) == 0 {
		t.Fatal("README.md has no ```go block: the fences changed?")
	}
	files := testFiles(t)
	for i, snippet := range snippets {
		best, bestFile := 0, ""
		for _, f := range files {
			if n := matched(snippet.lines, f.lines); n > best {
				best, bestFile = n, f.path
			}
		}
		if best == len(snippet.lines) {
			t.Logf("snippet %d (README.md:%d) is in %s", i+1, snippet.at, bestFile)
			continue
		}
		closest := "none has its first line"
		if bestFile != "" {
			closest = fmt.Sprintf("closest: %s, with its first %d of %d lines", bestFile, best, len(snippet.lines))
		}
		t.Errorf("snippet %d (README.md:%d): no test file has %q after the snippet's lines before it (%s): no Example or test compiles the snippet as the README shows it",
			i+1, snippet.at, snippet.lines[best], closest)
	}
}

// snippet is a ```go block of the README: its significant lines (see
// significant), and the line of its fence.
type snippet struct {
	at    int
	lines []string
}

// goBlocks returns the ```go blocks of a Markdown text.
func goBlocks(md string) []snippet {
	var out []snippet
	var cur *snippet
	for i, line := range strings.Split(md, "\n") {
		fence := strings.TrimSpace(line)
		switch {
		case cur == nil && fence == "```go":
			cur = &snippet{at: i + 1}
		case cur != nil && fence == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			if s, ok := significant(line); ok {
				cur.lines = append(cur.lines, s)
			}
		}
	}
	return out
}

// significant returns line trimmed, with every run of spaces and tabs made
// one space, and reports false for a blank or comment-only line.
func significant(line string) (string, bool) {
	s := strings.Join(strings.Fields(line), " ")
	if s == "" || strings.HasPrefix(s, "//") {
		return "", false
	}
	return s, true
}

// testFile is a _test.go file's path and its significant lines.
type testFile struct {
	path  string
	lines []string
}

// testFiles returns every _test.go file under the repository's root (the
// nested modules' included), but this one, whose only Go is its own.
func testFiles(t *testing.T) []testFile {
	t.Helper()
	var files []testFile
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") && path != "."):
			return filepath.SkipDir
		case d.IsDir() || !strings.HasSuffix(path, "_test.go") || path == "readme_test.go":
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		tf := testFile{path: path}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if s, ok := significant(sc.Text()); ok {
				tf.lines = append(tf.lines, s)
			}
		}
		files = append(files, tf)
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// matched returns how many of want, from the first, appear in order among
// have.
func matched(want, have []string) int {
	n := 0
	for _, h := range have {
		if n < len(want) && h == want[n] {
			n++
		}
	}
	return n
}
