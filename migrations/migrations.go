// Package migrations holds MaxQ's schema as numbered SQL files, embedded so
// that every binary carries the schema it expects and applies it at start.
//
// Files are named NNN_description.up.sql and applied in order by
// internal/migrate; a file, once released, never changes — a change to the
// schema is a new file.
package migrations

import "embed"

// FS holds the *.up.sql files of this directory.
//
//go:embed *.up.sql
var FS embed.FS
