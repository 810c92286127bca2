package grammar

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/dlclark/regexp2"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// suiteSchema is one schema of the JSON-Schema-Test-Suite.
type suiteSchema struct {
	file, description string
	schema            json.RawMessage
}

// loadSuite reads the draft 2020-12 schemas of the official
// JSON-Schema-Test-Suite (testdata, MIT licence beside it).
func loadSuite(t testing.TB) []suiteSchema {
	t.Helper()
	f, err := os.Open("testdata/json-schema-test-suite-draft2020-12.tar.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var out []suiteSchema
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(h.Name, ".json") {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		var groups []struct {
			Description string          `json:"description"`
			Schema      json.RawMessage `json:"schema"`
		}
		if err := json.Unmarshal(data, &groups); err != nil {
			t.Fatalf("%s: %v", h.Name, err)
		}
		for _, g := range groups {
			out = append(out, suiteSchema{file: strings.TrimPrefix(h.Name, "tests/draft2020-12/"), description: g.Description, schema: g.Schema})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].file < out[j].file })
	if len(out) < 400 {
		t.Fatalf("the suite has %d schemas; expected the whole draft 2020-12 collection", len(out))
	}
	return out
}

// validator compiles schema with an independent validator (formats
// asserted).
func validator(t testing.TB, schema []byte) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseRegexpEngine(ecmaRegexp)
	c.RegisterFormat(&jsonschema.Format{Name: "regex", Validate: func(v any) error {
		if s, ok := v.(string); ok {
			_, err := ecmaRegexp(s)
			return err
		}
		return nil
	}})
	if err := c.AddResource(defaultBase, doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile(defaultBase)
	if err != nil {
		t.Fatalf("the validator cannot compile the schema: %v", err)
	}
	return s
}

// ecmaRegexp reads patterns with regexp2 in ECMAScript mode (JSON
// Schema's dialect) for the validator.
func ecmaRegexp(s string) (jsonschema.Regexp, error) {
	// regexp2 knows the short names of Unicode categories only.
	for long, short := range categoryAliases {
		s = strings.ReplaceAll(s, `\p{`+long+`}`, `\p{`+short+`}`)
		s = strings.ReplaceAll(s, `\P{`+long+`}`, `\P{`+short+`}`)
	}
	re, err := regexp2.Compile(s, regexp2.ECMAScript|regexp2.Unicode)
	if err != nil {
		return nil, err
	}
	return ecmaRE{re}, nil
}

type ecmaRE struct{ re *regexp2.Regexp }

func (r ecmaRE) MatchString(s string) bool {
	ok, err := r.re.MatchString(s)
	return ok && err == nil
}

func (r ecmaRE) String() string { return r.re.String() }

// TestSuiteSchemas compiles every schema of the JSON-Schema-Test-Suite:
// each is either refused naming a keyword or a limit, or compiled, and
// then outputs sampled from random-weight models over the DeepSeek-V3
// vocabulary at temperature 1 parse and validate.
func TestSuiteSchemas(t *testing.T) {
	v, eos := dsVocab(t)
	bytesOf := byteTokens(t, v)
	seeds := 4
	if testing.Short() {
		seeds = 1
	}
	suite := loadSuite(t)
	accepted, refused, natural, total := 0, 0, 0, 0
	byKeyword := map[string]int{}
	for i, s := range suite {
		g, err := Compile(Spec{Kind: KindJSONSchema, Text: string(s.schema)}, v, testLimits())
		if err != nil {
			var ge *Error
			if errors.Is(err, ErrUnsatisfiable) {
				refused++
				byKeyword["unsatisfiable"]++
				continue
			}
			if !errors.As(err, &ge) || (ge.Keyword == "" && ge.Limit == "") {
				t.Errorf("%s %q: refused without naming a keyword or limit: %v", s.file, s.description, err)
				continue
			}
			refused++
			byKeyword[ge.Keyword+ge.Limit]++
			continue
		}
		accepted++
		val := validator(t, s.schema)
		for seed := range seeds {
			lm := &randomLM{seed: uint64(i*131 + seed), scale: 2, n: v.Size()}
			gen := generate(t, g, lm, uint64(seed), eos, 400, bytesOf)
			total++
			if gen.completed {
				natural++
			}
			inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(gen.text))
			if err != nil {
				t.Errorf("%s %q seed %d: output does not parse: %v\n%s", s.file, s.description, seed, err, gen.text)
				continue
			}
			if err := val.Validate(inst); err != nil {
				t.Errorf("%s %q seed %d: output does not validate: %v\n%s\nschema %s", s.file, s.description, seed, err, gen.text, s.schema)
			}
		}
	}
	t.Logf("%d schemas: %d compiled, %d refused by keyword or limit %v; %d outputs, %d ended by the model", len(suite), accepted, refused, byKeyword, total, natural)
	if accepted < len(suite)/2 {
		t.Errorf("only %d of %d suite schemas compiled", accepted, len(suite))
	}
}
