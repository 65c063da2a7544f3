package engine

// CommandLine returns the argv that starts the engine: command, then the
// config's flags. For an engine whose model is positional, the first
// ModelFlag occurrence (flag and value, or --flag=value) is taken out of the
// flags and its value placed right after the command.
func (e *Engine) CommandLine(command, flags []string) []string {
	out := append([]string(nil), command...)
	if !e.ModelPositional || e.ModelFlag == "" {
		return append(out, flags...)
	}
	model, rest, ok := e.SplitModel(flags)
	if !ok {
		return append(out, flags...)
	}
	return append(append(out, model), rest...)
}

// SplitModel takes the first ModelFlag occurrence out of flags: the model
// and the other flags; ok is false when the flags name no model.
func (e *Engine) SplitModel(flags []string) (model string, rest []string, ok bool) {
	if e.ModelFlag == "" {
		return "", flags, false
	}
	for i, f := range flags {
		switch {
		case f == e.ModelFlag && i+1 < len(flags):
			rest = append(append(rest, flags[:i]...), flags[i+2:]...)
			return flags[i+1], rest, true
		case len(f) > len(e.ModelFlag) && f[:len(e.ModelFlag)+1] == e.ModelFlag+"=":
			rest = append(append(rest, flags[:i]...), flags[i+1:]...)
			return f[len(e.ModelFlag)+1:], rest, true
		}
	}
	return "", flags, false
}
