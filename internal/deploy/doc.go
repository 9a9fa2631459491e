// Package deploy holds no code: its tests check MaxQ's deployment files in
// the repository root. template_test.go reads template.yaml (AWS SAM) the
// way CloudFormation would resolve its names; package_test.go runs the
// Makefile's build-<Function> targets exactly as `sam build` does and
// inspects the Lambda packages they make.
package deploy
