package tokenizer

// byteLevelAlphabet maps every byte value to the printable rune that stands
// for it in a byte-level BPE vocabulary. The printable Latin-1 bytes
// ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for themselves; the remaining 68 bytes
// are assigned the runes U+0100, U+0101, … in increasing byte order. This is
// the definition used by every byte-level BPE vocabulary (GPT-2 onwards).
var byteLevelAlphabet = func() (table [256]rune) {
	next := rune(256)
	for b := 0; b < 256; b++ {
		switch {
		case b >= '!' && b <= '~', b >= 0xA1 && b <= 0xAC, b >= 0xAE && b <= 0xFF:
			table[b] = rune(b)
		default:
			table[b] = next
			next++
		}
	}
	return table
}()

// byteLevelEncoded holds the UTF-8 form of byteLevelAlphabet so that mapping
// a byte costs one table lookup.
var byteLevelEncoded = func() (table [256]string) {
	for b, r := range byteLevelAlphabet {
		table[b] = string(r)
	}
	return table
}()

// byteLevelInverse maps a rune of the byte-level alphabet back to its byte.
// Runes outside the alphabet are absent.
var byteLevelInverse = func() map[rune]byte {
	m := make(map[rune]byte, 256)
	for b, r := range byteLevelAlphabet {
		m[r] = byte(b)
	}
	return m
}()

// appendByteLevel appends the byte-level spelling of s to dst.
func appendByteLevel(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		dst = append(dst, byteLevelEncoded[s[i]]...)
	}
	return dst
}

// appendByteLevelDecoded appends the bytes a byte-level token stands for. A
// token containing a rune outside the alphabet is appended verbatim, which is
// how byte-level decoders treat tokens that were not produced by the byte map.
func appendByteLevelDecoded(dst []byte, token string) []byte {
	start := len(dst)
	for _, r := range token {
		b, ok := byteLevelInverse[r]
		if !ok {
			return append(dst[:start], token...)
		}
		dst = append(dst, b)
	}
	return dst
}
