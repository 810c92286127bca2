package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cpmla/cpmla/tokenizer"
)

func init() {
	register(newTokenizeCmd)
	register(newDetokenizeCmd)
}

func newTokenizeCmd() *cobra.Command {
	var textFile, text, dir string
	var noSpecial bool
	cmd := &cobra.Command{
		Use:   "tokenize [--text-file F | --text S]",
		Short: "Print the token ids of a text as a JSON list",
		Long: "Tokenize a text with the embedded DeepSeek-V3 tokenizer, or with the tokenizer.json " +
			"in --tokenizer DIR. By default BOS is added and control-token strings such as " +
			"<｜User｜> in the text become their ids; --no-special adds nothing and encodes " +
			"those strings as plain text.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fileSet, textSet := cmd.Flags().Changed("text-file"), cmd.Flags().Changed("text")
			if fileSet == textSet {
				return fmt.Errorf("give exactly one of --text-file and --text (got %s)", map[bool]string{true: "both", false: "neither"}[fileSet])
			}
			if fileSet {
				data, err := os.ReadFile(textFile)
				if err != nil {
					return fmt.Errorf("read --text-file: %w", err)
				}
				text = string(data)
			}
			tk, err := loadTokenizer(dir, "")
			if err != nil {
				return err
			}
			ids := tk.Encode(text, !noSpecial)
			if ids == nil {
				ids = []int{}
			}
			out, err := json.Marshal(ids)
			if err != nil {
				return fmt.Errorf("encode ids as JSON: %w", err)
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), string(out))
			return err
		},
	}
	cmd.Flags().StringVar(&textFile, "text-file", "", "file whose contents are tokenized")
	cmd.Flags().StringVar(&text, "text", "", "text to tokenize")
	cmd.Flags().BoolVar(&noSpecial, "no-special", false, "add no BOS and encode control-token strings as plain text")
	cmd.Flags().StringVar(&dir, "tokenizer", "", "directory with tokenizer.json (and tokenizer_config.json); default: embedded DeepSeek-V3")
	return cmd
}

func newDetokenizeCmd() *cobra.Command {
	var idList, dir string
	var skipSpecial bool
	cmd := &cobra.Command{
		Use:   "detokenize --ids 1,2,3",
		Short: "Print the text of a comma-separated list of token ids",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ids, err := parseIDList("--ids", idList)
			if err != nil {
				return err
			}
			tk, err := loadTokenizer(dir, "")
			if err != nil {
				return err
			}
			for _, id := range ids {
				if _, ok := tk.Token(id); !ok {
					return fmt.Errorf("--ids: %d is not a token id of this tokenizer (valid ids are below %d)", id, tk.VocabSize())
				}
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), tk.Decode(ids, skipSpecial))
			return err
		},
	}
	cmd.Flags().StringVar(&idList, "ids", "", "comma-separated token ids, e.g. 0,19923,2058")
	cmd.Flags().BoolVar(&skipSpecial, "skip-special", false, "leave out special tokens such as BOS and EOS")
	cmd.Flags().StringVar(&dir, "tokenizer", "", "directory with tokenizer.json (and tokenizer_config.json); default: embedded DeepSeek-V3")
	return cmd
}

// parseIDList parses the token ids of flag: "1, 2,3" (a JSON list such as
// "[1,2,3]" is accepted too). Every item must be a non-negative integer: an
// empty item ("1,,2") is refused, not skipped.
func parseIDList(flag, s string) ([]int, error) {
	s = strings.TrimSpace(s)
	s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("%s is empty; give comma-separated token ids, e.g. %s 0,19923,2058", flag, flag)
	}
	var ids []int
	for i, f := range strings.Split(s, ",") {
		id, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || id < 0 {
			return nil, fmt.Errorf("%s item %d %q is not a non-negative integer; give e.g. %s 0,19923,2058", flag, i+1, f, flag)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// loadTokenizer is a command's tokenizer: the tokenizer.json in --tokenizer
// DIR when set (a directory without one is refused), else the --model
// checkpoint's own when it has one, else the embedded DeepSeek-V3 tokenizer.
func loadTokenizer(flag, model string) (*tokenizer.Tokenizer, error) {
	if flag != "" {
		tk, err := tokenizer.Load(flag)
		if err != nil {
			return nil, fmt.Errorf("--tokenizer %s: %w", flag, err)
		}
		return tk, nil
	}
	if st, err := os.Stat(model); err == nil && st.IsDir() {
		return tokenizer.ForCheckpoint(model)
	}
	return tokenizer.Default()
}
