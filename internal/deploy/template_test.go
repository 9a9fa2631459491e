package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/maxq-dev/maxq/internal/config"
)

// repoRoot is the repository's root directory, where template.yaml and the
// Makefile live.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(root, "go.mod"))
	require.NoError(t, err, "the repository root holds go.mod")
	return root
}

// obj is a JSON-like CloudFormation value: map[string]any, []any, string,
// int, bool, float64 or nil.
type obj = map[string]any

// loadTemplate reads template.yaml with its short-form intrinsics (!Ref,
// !Sub, !GetAtt, !If…) turned into their long form ({"Ref": …},
// {"Fn::Sub": …}), as CloudFormation reads them.
func loadTemplate(t *testing.T) obj {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "template.yaml"))
	require.NoError(t, err)
	var doc yaml.Node
	require.NoError(t, yaml.Unmarshal(data, &doc))
	v, err := longForm(&doc)
	require.NoError(t, err)
	tpl, ok := v.(obj)
	require.True(t, ok, "template.yaml is a mapping")
	return tpl
}

// longForm converts a YAML node to a CloudFormation value.
func longForm(n *yaml.Node) (any, error) {
	intrinsic := strings.HasPrefix(n.Tag, "!") && !strings.HasPrefix(n.Tag, "!!")
	var v any
	switch n.Kind {
	case yaml.DocumentNode:
		return longForm(n.Content[0])
	case yaml.AliasNode:
		return longForm(n.Alias)
	case yaml.ScalarNode:
		if intrinsic {
			v = n.Value
		} else if err := n.Decode(&v); err != nil {
			return nil, fmt.Errorf("line %d: %w", n.Line, err)
		}
	case yaml.SequenceNode:
		list := []any{}
		for _, c := range n.Content {
			item, err := longForm(c)
			if err != nil {
				return nil, err
			}
			list = append(list, item)
		}
		v = list
	case yaml.MappingNode:
		m := obj{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			val, err := longForm(n.Content[i+1])
			if err != nil {
				return nil, err
			}
			m[n.Content[i].Value] = val
		}
		v = m
	}
	if !intrinsic {
		return v, nil
	}
	switch fn := strings.TrimPrefix(n.Tag, "!"); fn {
	case "Ref", "Condition":
		return obj{fn: v}, nil
	case "GetAtt":
		if s, ok := v.(string); ok { // !GetAtt Resource.Attribute
			name, attr, _ := strings.Cut(s, ".")
			v = []any{name, attr}
		}
		return obj{"Fn::GetAtt": v}, nil
	default:
		return obj{"Fn::" + fn: v}, nil
	}
}

// get walks a path of keys through nested mappings; nil when absent.
func get(v any, path ...string) any {
	for _, k := range path {
		m, ok := v.(obj)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// resourcesOfType lists the logical ids of the template's resources of typ.
func resourcesOfType(tpl obj, typ string) []string {
	var ids []string
	for id, r := range get(tpl, "Resources").(obj) {
		if get(r, "Type") == typ {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// functionProperty is a function's property, or else the Globals' one.
func functionProperty(tpl obj, id, name string) any {
	if v := get(tpl, "Resources", id, "Properties", name); v != nil {
		return v
	}
	return get(tpl, "Globals", "Function", name)
}

// envVar is a function's environment variable, or else the Globals' one.
func envVar(tpl obj, id, name string) any {
	if v := get(tpl, "Resources", id, "Properties", "Environment", "Variables", name); v != nil {
		return v
	}
	return get(tpl, "Globals", "Function", "Environment", "Variables", name)
}

func TestTemplateFunctions(t *testing.T) {
	t.Parallel()
	tpl := loadTemplate(t)
	require.Equal(t, "AWS::Serverless-2016-10-31", tpl["Transform"])
	makefile, err := os.ReadFile(filepath.Join(repoRoot(t), "Makefile"))
	require.NoError(t, err)

	functions := resourcesOfType(tpl, "AWS::Serverless::Function")
	require.Equal(t, []string{"ApiFunction", "WorkerFunction"}, functions)
	for _, id := range functions {
		t.Run(id, func(t *testing.T) {
			t.Parallel()
			// sam build runs `make build-<LogicalId>` in CodeUri, which must
			// hold the Makefile.
			require.Equal(t, "makefile", get(tpl, "Resources", id, "Metadata", "BuildMethod"))
			require.Regexp(t, regexp.MustCompile(`(?m)^build-`+id+`:`), string(makefile), "the Makefile has a build-%s target", id)
			codeURI, _ := functionProperty(tpl, id, "CodeUri").(string)
			require.FileExists(t, filepath.Join(repoRoot(t), codeURI, "Makefile"))

			require.Equal(t, "provided.al2023", functionProperty(tpl, id, "Runtime"))
			require.Equal(t, "bootstrap", functionProperty(tpl, id, "Handler"))
			require.Equal(t, []any{obj{"Ref": "Architecture"}}, functionProperty(tpl, id, "Architectures"))

			// Its logs go to a log group of the template, which expires them.
			group, _ := get(functionProperty(tpl, id, "LoggingConfig"), "LogGroup", "Ref").(string)
			require.Equal(t, "AWS::Logs::LogGroup", get(tpl, "Resources", group, "Type"), "%s logs to a log group of the template", id)
			require.Equal(t, obj{"Ref": "LogRetentionDays"}, get(tpl, "Resources", group, "Properties", "RetentionInDays"))

			require.NotNil(t, functionProperty(tpl, id, "ReservedConcurrentExecutions"), "%s caps its concurrency, and so its connections", id)
			require.NotNil(t, envVar(tpl, id, "MAXQ_DATABASE_URL"))
			require.Equal(t, obj{"Ref": "ApiToken"}, envVar(tpl, id, "MAXQ_API_TOKEN"))
		})
	}

	t.Run("API", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, []string{"HttpApi"}, resourcesOfType(tpl, "AWS::Serverless::HttpApi"))
		routes := map[string]any{}
		for _, e := range get(tpl, "Resources", "ApiFunction", "Properties", "Events").(obj) {
			require.Equal(t, "HttpApi", get(e, "Type"))
			require.Equal(t, obj{"Ref": "HttpApi"}, get(e, "Properties", "ApiId"))
			require.Equal(t, "2.0", get(e, "Properties", "PayloadFormatVersion"), "app.NewAPIHandler reads payload format 2.0")
			routes[get(e, "Properties", "Path").(string)] = get(e, "Properties", "Method")
		}
		require.Equal(t, map[string]any{"/": "ANY", "/{proxy+}": "ANY"}, routes)
		require.LessOrEqual(t, functionProperty(tpl, "ApiFunction", "Timeout"), 30, "API Gateway waits 30 s at most")
	})

	t.Run("Worker", func(t *testing.T) {
		t.Parallel()
		apiURL := obj{"Fn::Sub": "https://${HttpApi}.execute-api.${AWS::Region}.${AWS::URLSuffix}/api/v1"}
		require.Equal(t, apiURL, envVar(tpl, "WorkerFunction", "MAXQ_API_URL"))
		require.Equal(t, apiURL, get(tpl, "Outputs", "ApiUrl", "Value"))
		require.Equal(t, 900, functionProperty(tpl, "WorkerFunction", "Timeout"))
		require.Equal(t, obj{"Ref": "StepTimeout"}, envVar(tpl, "WorkerFunction", "MAXQ_STEP_TIMEOUT"))
		require.Equal(t, obj{"Ref": "Listen"}, envVar(tpl, "WorkerFunction", "MAXQ_LISTEN"))

		events := get(tpl, "Resources", "WorkerFunction", "Properties", "Events").(obj)
		require.Len(t, events, 1)
		for _, e := range events {
			require.Equal(t, "Schedule", get(e, "Type"))
			require.Equal(t, obj{"Ref": "WorkerSchedule"}, get(e, "Properties", "Schedule"))
		}
		require.Equal(t, "rate(1 minute)", get(tpl, "Parameters", "WorkerSchedule", "Default"))
		// A step timeout the worker could never fit would leave every step
		// without one pending forever.
		require.Less(t, get(tpl, "Parameters", "StepTimeout", "Default"), 897)
		require.Less(t, get(tpl, "Parameters", "StepTimeout", "MaxValue"), 897)
	})

	t.Run("Secrets", func(t *testing.T) {
		t.Parallel()
		for _, p := range []string{"DatabaseUrl", "ApiToken"} {
			require.Equal(t, true, get(tpl, "Parameters", p, "NoEcho"), "%s is NoEcho", p)
		}
		require.GreaterOrEqual(t, get(tpl, "Parameters", "ApiToken", "MinLength"), 16, "config refuses shorter tokens")
		require.Equal(t, "false", get(tpl, "Parameters", "Listen", "Default"), "LISTEN off by default, for RDS Proxy")
	})
}

// TestTemplateEnvironment checks that every MAXQ_ variable the template
// sets is one MaxQ reads.
func TestTemplateEnvironment(t *testing.T) {
	t.Parallel()
	tpl := loadTemplate(t)
	known := map[string]bool{}
	_, err := config.Parse(func(name string) string { known[name] = true; return "" }, config.Defaults())
	require.NoError(t, err)

	vars := map[string]any{}
	for k, v := range get(tpl, "Globals", "Function", "Environment", "Variables").(obj) {
		vars[k] = v
	}
	for _, id := range resourcesOfType(tpl, "AWS::Serverless::Function") {
		if m, ok := get(tpl, "Resources", id, "Properties", "Environment", "Variables").(obj); ok {
			for k, v := range m {
				vars[k] = v
			}
		}
	}
	require.NotEmpty(t, vars)
	for name := range vars {
		require.True(t, known[name], "%s is not a variable MaxQ reads (internal/config)", name)
	}
}

// TestTemplateReferences resolves every name the template uses: a Ref, a
// ${Name} of a Fn::Sub, a Fn::GetAtt and a condition must each name a
// parameter, a resource, a pseudo parameter or a condition declared in the
// template; and every parameter and condition is used.
func TestTemplateReferences(t *testing.T) {
	t.Parallel()
	tpl := loadTemplate(t)
	params := keys(get(tpl, "Parameters"))
	resources := keys(get(tpl, "Resources"))
	conditions := keys(get(tpl, "Conditions"))
	require.NotEmpty(t, params)
	require.NotEmpty(t, resources)

	usedParams, usedConditions := map[string]bool{}, map[string]bool{}
	var problems []string
	ref := func(where, name string) {
		switch {
		case strings.HasPrefix(name, "AWS::"):
		case params[name]:
			usedParams[name] = true
		case resources[name]:
		default:
			problems = append(problems, fmt.Sprintf("%s: %q is neither a parameter nor a resource", where, name))
		}
	}
	attr := func(where, name string) {
		if !resources[name] {
			problems = append(problems, fmt.Sprintf("%s: an attribute of %q, which is not a resource", where, name))
		}
	}
	cond := func(where string, v any) {
		name, _ := v.(string)
		if !conditions[name] {
			problems = append(problems, fmt.Sprintf("%s: condition %v is not declared", where, v))
		}
		usedConditions[name] = true
	}
	subVar := regexp.MustCompile(`\$\{([^}]*)\}`)

	var walk func(where string, v any)
	walk = func(where string, v any) {
		switch v := v.(type) {
		case []any:
			for i, item := range v {
				walk(fmt.Sprintf("%s[%d]", where, i), item)
			}
		case obj:
			for k, val := range v {
				at := where + "/" + k
				switch k {
				case "Ref":
					name, _ := val.(string)
					ref(at, name)
					continue
				case "Fn::GetAtt":
					list, _ := val.([]any)
					require.NotEmpty(t, list, at)
					name, _ := list[0].(string)
					attr(at, name)
				case "Fn::Sub":
					text, locals := val, obj{}
					if list, ok := val.([]any); ok {
						require.Len(t, list, 2, at)
						text, locals = list[0], list[1].(obj)
					}
					s, _ := text.(string)
					for _, m := range subVar.FindAllStringSubmatch(s, -1) {
						name := m[1]
						if strings.HasPrefix(name, "!") || locals[name] != nil {
							continue // ${!Literal}, or a variable of the Fn::Sub itself
						}
						if res, _, isAttr := strings.Cut(name, "."); isAttr && !strings.HasPrefix(name, "AWS::") {
							attr(at, res)
							continue
						}
						ref(at, name)
					}
				case "Fn::If":
					list, _ := val.([]any)
					require.Len(t, list, 3, at)
					cond(at, list[0])
				case "Condition":
					// A resource's or an output's condition, or Fn::Condition.
					if s, ok := val.(string); ok {
						cond(at, s)
						continue
					}
				}
				walk(at, val)
			}
		}
	}
	for _, section := range []string{"Conditions", "Globals", "Resources", "Outputs"} {
		walk(section, tpl[section])
	}
	require.Empty(t, problems)

	for name := range params {
		require.True(t, usedParams[name], "parameter %s is never used", name)
	}
	for name := range conditions {
		require.True(t, usedConditions[name], "condition %s is never used", name)
	}
}

func keys(v any) map[string]bool {
	out := map[string]bool{}
	if m, ok := v.(obj); ok {
		for k := range m {
			out[k] = true
		}
	}
	return out
}
