//go:build libcni11

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
)

// runLifecycle runs CNI 1.1.0's GC (with the valid attachments as CONTAINER_ID:IFNAME) or STATUS
// of a network, as a runtime on libcni 1.2 or later does.
func runLifecycle(command, configPath string, rest []string) *failure {
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
	case "gc":
		args := &libcni.GCArgs{}
		for _, item := range rest {
			id, ifname, ok := strings.Cut(item, ":")
			if !ok || id == "" || ifname == "" {
				return ownFailure(fmt.Errorf("valid attachment %q is not CONTAINER_ID:IFNAME", item))
			}
			args.ValidAttachments = append(args.ValidAttachments, types.GCAttachment{ContainerID: id, IfName: ifname})
		}
		err = cni.GCNetworkList(ctx, list, args)
	case "status":
		if len(rest) != 0 {
			return ownFailure(errors.New("usage: cnidrive status CONFIG"))
		}
		err = cni.GetStatusNetworkList(ctx, list)
	}
	if err != nil {
		return describe(command, err)
	}
	// Which version libcni ran the network at: the highest of cniVersion and cniVersions it knows.
	fmt.Fprintf(os.Stderr, "cnidrive %s: network %s at CNI %s\n", command, list.Name, list.CNIVersion)
	return nil
}
