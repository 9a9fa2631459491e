package cli

// CommandNames lists maxq's commands, for the tests of package cli_test.
func CommandNames() []string {
	names := make([]string, len(commands))
	for i, c := range commands {
		names[i] = c.name
	}
	return names
}
