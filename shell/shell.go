// Package shell quotes and splits command lines the way a POSIX shell reads
// them, without expansions: launch scripts, log lines and the command
// strings of study files all use these three functions.
package shell

import (
	"errors"
	"strings"
)

// Quote returns s as one shell word: unchanged when it holds only
// characters no shell treats specially, in double quotes with \-escapes
// when it holds $ or a backquote (a literal $ inside single quotes reads
// as a mistake to readers and to shellcheck, SC2016), else in single
// quotes (a single quote inside becomes '"'"'). The empty string becomes
// two single quotes.
func Quote(s string) string {
	if s == "" {
		return "''"
	}
	if strings.IndexFunc(s, unsafe) < 0 {
		return s
	}
	if strings.ContainsAny(s, "$`") {
		return `"` + dquote.Replace(s) + `"`
	}
	return "'" + strings.ReplaceAll(s, "'", `'"'"'`) + "'"
}

// dquote escapes what is special inside double quotes.
var dquote = strings.NewReplacer(`\`, `\\`, `"`, `\"`, `$`, `\$`, "`", "\\`")

// unsafe reports whether r needs quoting.
func unsafe(r rune) bool {
	return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=,+@%", r))
}

// Join quotes each word of argv and joins them with spaces.
func Join(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = Quote(a)
	}
	return strings.Join(q, " ")
}

// Errors of Split.
var (
	ErrSingleQuote = errors.New("unterminated single quote")
	ErrDoubleQuote = errors.New("unterminated double quote")
)

// Split splits s into words like a POSIX shell without expansions: blanks
// (space, tab, newline) separate words, single quotes are literal, inside
// double quotes a backslash escapes only " \ $ and `, and outside quotes a
// backslash escapes the next character. Split(Join(argv)) is argv.
func Split(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, ErrSingleQuote
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte(`"\$`+"`", s[i+1]) >= 0 {
					i++
				}
				cur.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, ErrDoubleQuote
			}
			inWord = true
		case c == '\\':
			if i+1 < len(s) {
				i++
				cur.WriteByte(s[i])
			}
			inWord = true
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}
