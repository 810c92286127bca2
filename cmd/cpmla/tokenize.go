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
			tk, err := tokenizer.ForCheckpoint(dir)
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
			ids, err := parseIDList(idList)
			if err != nil {
				return err
			}
			tk, err := tokenizer.ForCheckpoint(dir)
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

// parseIDList parses "1, 2,3" (a JSON list such as "[1,2,3]" is accepted too).
func parseIDList(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("--ids is empty; give comma-separated token ids, e.g. --ids 0,19923,2058")
	}
	var ids []int
	for i, f := range strings.Split(s, ",") {
		id, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || id < 0 {
			return nil, fmt.Errorf("--ids item %d %q is not a non-negative integer; give e.g. --ids 0,19923,2058", i+1, f)
		}
		ids = append(ids, id)
	}
	return ids, nil
}
