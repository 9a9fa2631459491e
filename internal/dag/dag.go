// Package dag is the pure graph logic of a stage: which dependency names
// resolve, and that the steps a stage adds form no cycle.
package dag

import (
	"fmt"
	"sort"
	"strings"
)

// Cycle finds a dependency cycle among the steps of one stage. deps maps each
// step name to the names it depends on; names outside deps (steps of earlier
// stages) cannot be part of a cycle, because they exist already. It returns
// the cycle as a path ("a → b → a"), or "" when there is none.
func Cycle(deps map[string][]string) string {
	const (
		unvisited = iota
		visiting
		done
	)
	state := make(map[string]int, len(deps))
	var stack []string
	var found []string
	var visit func(n string) bool
	visit = func(n string) bool {
		state[n] = visiting
		stack = append(stack, n)
		for _, d := range deps[n] {
			if _, inStage := deps[d]; !inStage {
				continue
			}
			switch state[d] {
			case visiting:
				i := len(stack) - 1
				for stack[i] != d {
					i--
				}
				found = append(append([]string{}, stack[i:]...), d)
				return true
			case unvisited:
				if visit(d) {
					return true
				}
			}
		}
		stack = stack[:len(stack)-1]
		state[n] = done
		return false
	}
	names := make([]string, 0, len(deps))
	for n := range deps {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if state[n] == unvisited && visit(n) {
			return strings.Join(found, " → ")
		}
	}
	return ""
}

// Unknown returns the dependency names that name neither a step of the stage
// (deps) nor an existing step of the run (known), as "step: dependency"
// descriptions in a stable order.
func Unknown(deps map[string][]string, known map[string]bool) []string {
	var out []string
	for n, ds := range deps {
		for _, d := range ds {
			if _, inStage := deps[d]; !inStage && !known[d] {
				out = append(out, fmt.Sprintf("%s: %s", n, d))
			}
		}
	}
	sort.Strings(out)
	return out
}
