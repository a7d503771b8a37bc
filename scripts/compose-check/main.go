// compose-check loads a docker-compose file with compose-go, the library `docker compose` itself
// uses to read and validate compose files, and prints the normalized project as JSON (anchors and
// merges resolved, defaults applied). It exits non-zero with the loader's message when the file
// does not parse or does not validate against the Compose Specification.
//
// Usage: go run ./scripts/compose-check docker-compose.yml
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/compose-spec/compose-go/v2/cli"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: compose-check <docker-compose.yml>")
		os.Exit(2)
	}
	opts, err := cli.NewProjectOptions(
		[]string{os.Args[1]},
		cli.WithOsEnv,
		cli.WithConsistency(true),
		cli.WithResolvedPaths(true),
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, "compose-check:", err)
		os.Exit(1)
	}
	project, err := opts.LoadProject(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "compose-check: invalid compose file:", err)
		os.Exit(1)
	}
	out, err := project.MarshalJSON()
	if err != nil {
		fmt.Fprintln(os.Stderr, "compose-check:", err)
		os.Exit(1)
	}
	fmt.Println(string(out))
}
