// Package pglocal runs a private PostgreSQL cluster from the server binaries
// installed on the machine, for development and tests.
//
// Start finds initdb and postgres (FindBinaries), initializes the data
// directory if it holds no PG_VERSION, and runs postgres as a child process
// listening on 127.0.0.1 only, trusting every local connection as user
// postgres. The server log goes to server.log in the data directory. Stop
// asks for a fast shutdown and waits; Restart stops and starts again on the
// same port, so URLs handed out before stay valid.
//
// Running as root: initdb and postgres refuse to, so pglocal runs them as the
// OS user postgres. It hands the data directory to that user and makes the
// parent directories it created itself searchable (0755); a parent that
// already existed and that user cannot search is reported, not changed.
//
// A leftover server: when postmaster.pid names a live postgres (its parent
// was killed with SIGKILL, say), Start asks it for a fast shutdown, waits for
// it to go, and then starts its own, so the cluster it returns is always its
// child with the settings asked for. On Linux the child also gets SIGINT
// (fast shutdown) when the process that started it dies, so a crashed test
// binary does not leave a server behind.
//
// pglocal is Unix-only.
package pglocal
