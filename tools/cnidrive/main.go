// cnidrive is the smallest CNI runtime that calls plugins the way containerd and CRI-O do: through
// libcni, the Go library they are built on (here Debian's packaged copy). The tests and
// scripts/run.sh use it to prove that yh-genie's plugins work with the library real runtimes use,
// not only with a driver of our own.
//
//	cnidrive add|check|del CONFIG NETNS CONTAINER_ID IFNAME [CNI_ARGS]
//	cnidrive gc CONFIG [CONTAINER_ID:IFNAME ...]   (built with -tags libcni11)
//	cnidrive status CONFIG                         (built with -tags libcni11)
//
// Built two ways: against Debian's packaged libcni (GOPATH mode: CNI up to 1.0.0) as cnidrive, and
// in module mode against the libcni go.mod names (CNI 1.1.0: version lists, GC, STATUS) as
// cnidrive11. gc and status exist only in the second; gc's arguments are the valid attachments.
//
// CONFIG is a .conflist, or a single-plugin .conf/.json which is run as a list of one (as go-cni
// does). CNI_ARGS is "K=V;K=V". The environment gives CNI_PATH (plugin directories, ':'-separated,
// required), CNI_CACHE_DIR (libcni's result cache, default /var/lib/cni) and CNI_CAP_ARGS (a JSON
// object of capability arguments, e.g. {"portMappings": [...]}, handed to plugins that declare them).
//
// ADD prints the result exactly as the last plugin returned it (no version conversion), so a test
// can see which version a plugin answered in. On failure stdout holds a CNI error object and the
// exit status says whose failure it is: 1 a plugin's error (as libcni parsed it), 2 libcni's own
// refusal or this program's (bad usage, unreadable config, plugin not found, a command the
// config's version does not have). A one-line description goes to stderr either way.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
)

const usage = "usage: cnidrive add|check|del CONFIG NETNS CONTAINER_ID IFNAME [CNI_ARGS]"

// failure is an error with the exit status it ends the program with.
type failure struct {
	status int
	cni    *types.Error
}

func main() {
	if f := run(os.Args[1:]); f != nil {
		out, _ := json.Marshal(f.cni)
		fmt.Println(string(out))
		os.Exit(f.status)
	}
}

func run(args []string) *failure {
	if len(args) >= 2 && (args[0] == "gc" || args[0] == "status") {
		return runLifecycle(args[0], args[1], args[2:])
	}
	if len(args) < 5 || len(args) > 6 {
		return ownFailure(fmt.Errorf("%s (got %d arguments)", usage, len(args)))
	}
	command, configPath := args[0], args[1]
	rt := &libcni.RuntimeConf{NetNS: args[2], ContainerID: args[3], IfName: args[4]}
	if len(args) == 6 {
		pairs, err := parseArgs(args[5])
		if err != nil {
			return ownFailure(err)
		}
		rt.Args = pairs
	}
	if capArgs := os.Getenv("CNI_CAP_ARGS"); capArgs != "" {
		if err := json.Unmarshal([]byte(capArgs), &rt.CapabilityArgs); err != nil {
			return ownFailure(fmt.Errorf("CNI_CAP_ARGS is not a JSON object: %w", err))
		}
	}
	path := os.Getenv("CNI_PATH")
	if path == "" {
		return ownFailure(errors.New("CNI_PATH is not set: it names the directories plugins are found in"))
	}
	list, err := loadList(configPath)
	if err != nil {
		return ownFailure(err)
	}
	cni := libcni.NewCNIConfigWithCacheDir(filepath.SplitList(path), os.Getenv("CNI_CACHE_DIR"), nil)
	ctx := context.Background()

	switch command {
	case "add":
		result, err := cni.AddNetworkList(ctx, list, rt)
		if err != nil {
			return describe(command, err)
		}
		out, err := json.Marshal(result)
		if err != nil {
			return ownFailure(fmt.Errorf("cannot print the result: %w", err))
		}
		fmt.Println(string(out))
	case "check":
		err = cni.CheckNetworkList(ctx, list, rt)
	case "del":
		err = cni.DelNetworkList(ctx, list, rt)
	default:
		return ownFailure(fmt.Errorf("unknown command %q; %s", command, usage))
	}
	if err != nil {
		return describe(command, err)
	}
	return nil
}

// loadList reads CONFIG as libcni's users do: a .conflist as a list, anything else as one plugin.
func loadList(path string) (*libcni.NetworkConfigList, error) {
	if strings.HasSuffix(path, ".conflist") {
		return libcni.ConfListFromFile(path)
	}
	conf, err := libcni.ConfFromFile(path)
	if err != nil {
		return nil, err
	}
	return libcni.ConfListFromConf(conf)
}

// parseArgs splits "K=V;K=V" into pairs, refusing what a runtime would not send.
func parseArgs(text string) ([][2]string, error) {
	var pairs [][2]string
	if text == "" {
		return pairs, nil
	}
	for _, item := range strings.Split(text, ";") {
		kv := strings.SplitN(item, "=", 2)
		if len(kv) != 2 || kv[0] == "" {
			return nil, fmt.Errorf("CNI_ARGS %q: %q is not KEY=VALUE", text, item)
		}
		pairs = append(pairs, [2]string{kv[0], kv[1]})
	}
	return pairs, nil
}

// describe turns libcni's error into the program's answer: a plugin's CNI error (libcni wraps it
// with the plugin it came from, which goes to stderr) or libcni's own.
func describe(command string, err error) *failure {
	fmt.Fprintf(os.Stderr, "cnidrive %s: %v\n", command, err)
	var pluginErr *types.Error
	if errors.As(err, &pluginErr) {
		return &failure{status: 1, cni: pluginErr}
	}
	return &failure{status: 2, cni: types.NewError(types.ErrInternal, err.Error(), "")}
}

// ownFailure is a failure before or outside any plugin call.
func ownFailure(err error) *failure {
	fmt.Fprintf(os.Stderr, "cnidrive: %v\n", err)
	return &failure{status: 2, cni: types.NewError(types.ErrInternal, err.Error(), "")}
}
