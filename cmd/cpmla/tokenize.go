package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cpmla/cpmla/checkpoints"
	"github.com/cpmla/cpmla/internal/boundedread"
	"github.com/cpmla/cpmla/tokenizer"
)

func init() {
	register(newTokenizeCmd)
	register(newDetokenizeCmd)
}

func newTokenizeCmd() *cobra.Command {
	var textFile, text, dir, model, messagesFile, chatTemplate, kwargs string
	var noSpecial, noAddSpecial, render bool
	cmd := &cobra.Command{
		Use:   "tokenize [--text-file F | --text S | --messages F]",
		Short: "Print the token ids of a text (or of a rendered chat) as a JSON list",
		Long: "Tokenize a text with the checkpoint's tokenizer (--model DIR, or --tokenizer DIR), else " +
			"the embedded DeepSeek-V3 one. By default BOS is added and control-token strings such as " +
			"<｜User｜> in the text become their ids (Hugging Face's add_special_tokens=True); " +
			"--no-add-special adds nothing but still reads those strings as their ids " +
			"(add_special_tokens=False); --no-special also encodes them as plain text. " +
			"--messages FILE renders a JSON list of chat messages with the chat template " +
			"(--chat-template overrides it, --chat-template-kwargs passes e.g. '{\"enable_thinking\": false}') " +
			"and tokenizes the prompt as the server does; --render prints the prompt instead of ids.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sources := 0
			for _, f := range []string{"text-file", "text", "messages"} {
				if cmd.Flags().Changed(f) {
					sources++
				}
			}
			if sources != 1 {
				return fmt.Errorf("give exactly one of --text-file, --text and --messages (got %d)", sources)
			}
			if noSpecial && noAddSpecial {
				return fmt.Errorf("--no-special already adds nothing; give one of --no-special and --no-add-special")
			}
			if render && messagesFile == "" {
				return fmt.Errorf("--render prints a rendered chat; it needs --messages")
			}
			tk, err := loadTokenizer(dir, model)
			if err != nil {
				return err
			}
			if chatTemplate != "" {
				src, err := tokenizer.LoadChatTemplate(chatTemplate)
				if err != nil {
					return fmt.Errorf("--chat-template: %w", err)
				}
				if tk, err = tk.WithChatTemplate(src); err != nil {
					return fmt.Errorf("--chat-template: %w", err)
				}
			}
			var ids []int
			switch {
			case messagesFile != "":
				in, err := readChatInput(messagesFile, kwargs)
				if err != nil {
					return err
				}
				prompt, err := tk.RenderChat(in)
				if err != nil {
					return err
				}
				if render {
					_, err = fmt.Fprint(cmd.OutOrStdout(), prompt)
					return err
				}
				ids = tk.EncodeWith(prompt, tokenizer.EncodeOptions{ParseSpecial: true})
			default:
				if cmd.Flags().Changed("text-file") {
					data, err := boundedread.Path(textFile, maxTextFileBytes)
					err = boundedread.Advise(err, "split the text")
					if err != nil {
						return fmt.Errorf("--text-file: %w", err)
					}
					text = string(data)
				}
				ids = tk.EncodeWith(text, tokenizer.EncodeOptions{AddSpecial: !noSpecial && !noAddSpecial, ParseSpecial: !noSpecial})
			}
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
	cmd.Flags().BoolVar(&noAddSpecial, "no-add-special", false, "add no BOS but still read control-token strings as their ids (add_special_tokens=False)")
	cmd.Flags().StringVar(&dir, "tokenizer", "", "directory with tokenizer.json (and tokenizer_config.json, chat_template.jinja)")
	cmd.Flags().StringVar(&model, "model", "", "built-in checkpoint ("+strings.Join(checkpoints.Names(), ", ")+") or checkpoint directory whose tokenizer is used when it has one (default: the embedded DeepSeek-V3 tokenizer)")
	cmd.Flags().StringVar(&messagesFile, "messages", "", "JSON file with a list of chat messages, or an object with \"messages\", \"tools\", \"documents\" and \"add_generation_prompt\"")
	cmd.Flags().StringVar(&chatTemplate, "chat-template", "", "chat template file (or the template itself) instead of the tokenizer's")
	cmd.Flags().StringVar(&kwargs, "chat-template-kwargs", "", "JSON object of extra template variables, e.g. '{\"enable_thinking\": false}'")
	cmd.Flags().BoolVar(&render, "render", false, "with --messages: print the rendered prompt instead of its ids")
	return cmd
}

// chatFile is what --messages reads: a list of messages, or an object with
// them and the other request fields a chat template sees.
type chatFile struct {
	Messages []struct {
		Role       string  `json:"role"`
		Content    *string `json:"content"`
		Name       string  `json:"name"`
		ToolCallID string  `json:"tool_call_id"`
		Reasoning  *string `json:"reasoning_content"`
		ToolCalls  []struct {
			ID       string `json:"id"`
			Type     string `json:"type"`
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"messages"`
	Tools               []json.RawMessage `json:"tools"`
	Documents           []json.RawMessage `json:"documents"`
	AddGenerationPrompt *bool             `json:"add_generation_prompt"`
}

func readChatInput(path, kwargs string) (tokenizer.ChatInput, error) {
	var in tokenizer.ChatInput
	data, err := boundedread.Path(path, maxTextFileBytes)
	err = boundedread.Advise(err, "split the text")
	if err != nil {
		return in, fmt.Errorf("--messages: %w", err)
	}
	var f chatFile
	trimmed := strings.TrimSpace(string(data))
	if strings.HasPrefix(trimmed, "[") {
		err = json.Unmarshal(data, &f.Messages)
	} else {
		err = json.Unmarshal(data, &f)
	}
	if err != nil {
		return in, fmt.Errorf("--messages %s: %w", path, err)
	}
	in.Tools, in.Documents, in.AddGenerationPrompt = f.Tools, f.Documents, f.AddGenerationPrompt == nil || *f.AddGenerationPrompt
	for _, m := range f.Messages {
		msg := tokenizer.Message{Role: m.Role, Name: m.Name, ToolCallID: m.ToolCallID, Reasoning: m.Reasoning}
		if m.Content != nil {
			msg.Content = *m.Content
		}
		for _, c := range m.ToolCalls {
			msg.ToolCalls = append(msg.ToolCalls, tokenizer.ToolCall{ID: c.ID, Type: c.Type, Name: c.Function.Name, Arguments: c.Function.Arguments})
		}
		in.Messages = append(in.Messages, msg)
	}
	if kwargs != "" {
		if err := json.Unmarshal([]byte(kwargs), &in.Kwargs); err != nil {
			return in, fmt.Errorf("--chat-template-kwargs must be a JSON object: %w", err)
		}
	}
	return in, nil
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
// checkpoint's own (a built-in checkpoint's, or a directory's when it has
// one), else the embedded DeepSeek-V3 tokenizer.
func loadTokenizer(flag, model string) (*tokenizer.Tokenizer, error) {
	if flag != "" {
		tk, err := tokenizer.Load(flag)
		if err != nil {
			return nil, fmt.Errorf("--tokenizer %s: %w", flag, err)
		}
		return tk, nil
	}
	if fsys, ok := checkpoints.Open(model); ok {
		return tokenizer.LoadFS(fsys, "built-in "+model)
	}
	if st, err := os.Stat(model); err == nil && st.IsDir() {
		return tokenizer.ForCheckpoint(model)
	}
	return tokenizer.Default()
}

// maxTextFileBytes bounds the text `cpmla tokenize --text-file` reads.
const maxTextFileBytes = 256 << 20
