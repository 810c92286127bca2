package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cpmla/cpmla/eval"
)

// repoRoot is the repository root, two levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod at the repository root %s: %v", root, err)
	}
	return root
}

// markdownFiles lists every .md file of the repository outside .git.
func markdownFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 5 {
		t.Fatalf("found only %d markdown files under %s", len(files), root)
	}
	return files
}

var (
	mdLink       = regexp.MustCompile(`\]\(([A-Za-z0-9_./-]*[./][A-Za-z0-9_./-]*)(#[^)]*)?\)`)
	codeSpan     = regexp.MustCompile("`([^`\\s]+)`")
	machinePaths = []string{"/work/", "/home/", "/Users/", "/root/", "../shared", "shared/DESIGN.md"}
)

// A fresh clone's docs point only at files the clone has: no machine path,
// no link or quoted path outside the repository, no link to a missing file.
func TestDocsStayInsideTheRepository(t *testing.T) {
	root := repoRoot(t)
	for _, path := range markdownFiles(t, root) {
		rel, _ := filepath.Rel(root, path)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		text := string(data)
		for n, line := range strings.Split(text, "\n") {
			for _, p := range machinePaths {
				if strings.Contains(line, p) {
					t.Errorf("%s:%d names %q, which a clone does not have: %s", rel, n+1, p, strings.TrimSpace(line))
				}
			}
		}
		var targets []string
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			if !strings.Contains(m[1], "://") && !strings.HasPrefix(m[1], "mailto:") {
				targets = append(targets, m[1])
			}
		}
		for _, m := range codeSpan.FindAllStringSubmatch(text, -1) {
			if strings.HasPrefix(m[1], "../") || strings.HasSuffix(m[1], ".md") && !strings.ContainsAny(m[1], "*{}") {
				targets = append(targets, m[1])
			}
		}
		for _, target := range targets {
			// A path is read from the file's directory, or (as the README's
			// docs/... paths are) from the repository root.
			local := filepath.Join(filepath.Dir(path), target)
			fromRoot := filepath.Join(root, target)
			inside := func(p string) bool {
				r, err := filepath.Rel(root, p)
				return err == nil && !strings.HasPrefix(r, "..")
			}
			_, errLocal := os.Stat(local)
			_, errRoot := os.Stat(fromRoot)
			switch {
			case errLocal == nil && inside(local), errRoot == nil && inside(fromRoot):
			case !inside(local) && !inside(fromRoot):
				t.Errorf("%s points outside the repository: %s", rel, target)
			default:
				t.Errorf("%s points to %s, which does not exist", rel, target)
			}
		}
	}
}

// shellWords splits a command line the way sh does for the README's
// commands: blanks separate words, double or single quotes group them,
// $'...' groups them with the escapes \n, \t, \\ and \' (POSIX's
// dollar-single-quotes), and an unquoted # starts a comment.
func shellWords(line string) []string {
	var words []string
	var cur strings.Builder
	inWord := false
	quote := byte(0)
	dollar := false // inside $'...'
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case dollar && c == '\\' && i+1 < len(line):
			i++
			switch e := line[i]; e {
			case 'n':
				cur.WriteByte('\n')
			case 't':
				cur.WriteByte('\t')
			default:
				cur.WriteByte(e)
			}
		case dollar && c == '\'':
			dollar = false
		case dollar:
			cur.WriteByte(c)
		case quote != 0:
			if c == quote {
				quote = 0
			} else {
				cur.WriteByte(c)
			}
		case c == '$' && i+1 < len(line) && line[i+1] == '\'':
			dollar, inWord = true, true
			i++
		case c == '"' || c == '\'':
			quote, inWord = c, true
		case c == '#' && !inWord:
			i = len(line)
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

func TestShellWords(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{`a "b c" 'd e' # f`, []string{"a", "b c", "d e"}},
		{`x $'q: 1\nA:' y`, []string{"x", "q: 1\nA:", "y"}},
		{`$'it\'s\t\\'z "#"`, []string{"it's\t\\z", "#"}},
	} {
		if d := cmp.Diff(tc.want, shellWords(tc.in)); d != "" {
			t.Errorf("%q: %s", tc.in, d)
		}
	}
}

// readmeCommands are the lines of the README's first sh block.
func readmeCommands(t *testing.T) (readme string, lines []string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme = string(data)
	_, block, ok := strings.Cut(readme, "```sh\n")
	if !ok {
		t.Fatal("README.md has no ```sh block")
	}
	block, _, _ = strings.Cut(block, "```")
	for _, l := range strings.Split(block, "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	return readme, lines
}

// The README's first command runs as written, asks the built-in model one of
// its held-out arithmetic questions and prints the right answer: the text
// line is the tokenizer's decoding of the ids, and its "#### N" is the
// answer computed from the question's own numbers.
func TestReadmeFirstCommandAnswersItsQuestion(t *testing.T) {
	_, lines := readmeCommands(t)
	words := shellWords(lines[0])
	const prefix = "go run ./cmd/cpmla"
	if !strings.HasPrefix(strings.Join(words, " "), prefix+" ") {
		t.Fatalf("the README's first command %q does not start with %q", lines[0], prefix)
	}
	args := words[3:]
	flag := func(name string) string {
		for i, w := range args {
			if w == name && i+1 < len(args) {
				return args[i+1]
			}
		}
		return ""
	}
	prompt, modelName := flag("--prompt"), flag("--model")
	question, ok := strings.CutPrefix(prompt, "Question: ")
	if question, ok2 := strings.CutSuffix(question, "\nAnswer:"); !ok || !ok2 {
		t.Fatalf("the first command's --prompt %q is not lm-eval's gsm8k prompt \"Question: ...\\nAnswer:\"", prompt)
	} else {
		prompt = question
	}
	// The held-out file's answers are checked against their questions'
	// numbers by eval's TestHeldoutProblems.
	held, err := eval.HeldoutProblems()
	if err != nil {
		t.Fatal(err)
	}
	at := slices.IndexFunc(held, func(p eval.Problem) bool { return p.Question == prompt })
	if at < 0 {
		t.Fatalf("question %q is not one of the held-out problems", prompt)
	}
	want := held[at].Answer
	out := runCLI(t, args...)
	var idsLine, textLine string
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, "ids:"); ok {
			idsLine = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(l, "text:"); ok {
			textLine = strings.TrimSpace(v)
		}
	}
	if idsLine == "" || textLine == "" {
		t.Fatalf("the README's first command printed no ids: and text: lines:\n%s", out)
	}
	ids, err := parseIDList("ids", idsLine)
	if err != nil {
		t.Fatal(err)
	}
	text, err := strconv.Unquote(textLine)
	if err != nil {
		t.Fatalf("text line %q is not a quoted string: %v", textLine, err)
	}
	tk, err := loadTokenizer("", modelName)
	if err != nil {
		t.Fatal(err)
	}
	if d := tk.Decode(ids, false); text != d || text == "" {
		t.Errorf("text %q, want the decoding of ids %v: %q", text, ids, d)
	}
	if got := eval.StrictMatch(text); got != strconv.Itoa(want) {
		t.Errorf("the first command answered %q (strict match %q); %q has the answer %d", text, got, prompt, want)
	}
}

// The README installs the cpmla command before it first uses the bare name.
func TestReadmeInstallsBeforeBareCommands(t *testing.T) {
	readme, _ := readmeCommands(t)
	install := strings.Index(readme, "go install ./cmd/cpmla")
	if install < 0 {
		t.Fatal("the README never says go install ./cmd/cpmla")
	}
	bare := regexp.MustCompile("(?m)(^|`)cpmla ").FindStringIndex(readme)
	if bare == nil {
		t.Fatal("the README uses no bare cpmla command")
	}
	if bare[0] < install {
		t.Errorf("the README uses a bare cpmla command at byte %d before it says go install ./cmd/cpmla (byte %d)", bare[0], install)
	}
}

func TestVersion(t *testing.T) {
	out := runCLI(t, "--version")
	if !strings.HasPrefix(out, "cpmla ") || !strings.Contains(out, runtime.Version()) {
		t.Errorf("cpmla --version printed %q, want cpmla <version> ... %s", out, runtime.Version())
	}
}
