package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
)

// maxLine bounds one line of input: a result line of BenchmarkStep is
// about 500 bytes.
const maxLine = 64 << 10

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "steptable:", err)
		os.Exit(1)
	}
}

// run reads the named files (standard input when there are none) and
// writes the tables.
func run(args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
		_, err := fmt.Fprintln(stdout, "usage: steptable [file ...]   (BenchmarkStep output of one or more runs; standard input without files)")
		return err
	}
	rs := runs{}
	if len(args) == 0 {
		if err := read(rs, "standard input", stdin); err != nil {
			return err
		}
	}
	for _, name := range args {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		err = read(rs, name, f)
		f.Close()
		if err != nil {
			return err
		}
	}
	if len(rs) == 0 {
		return errors.New("no BenchmarkStep results in the input (run: go test ./model -run XXX -bench 'Step/.*/decode' -benchtime 20x)")
	}
	return rs.write(stdout)
}

// read adds every BenchmarkStep result of r to rs.
func read(rs runs, name string, r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxLine)
	for n := 1; sc.Scan(); n++ {
		res, ok, err := parseLine(sc.Text())
		if err != nil {
			return fmt.Errorf("%s:%d: %w", name, n, err)
		}
		if ok {
			rs.add(res)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s: %w (lines are at most %d bytes)", name, err, maxLine)
	}
	return nil
}
