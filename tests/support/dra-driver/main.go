// The test DRA driver of yh-genie's cluster suite: a kubelet plugin that publishes its node's
// network "devices" in a ResourceSlice and answers the kubelet's NodePrepareResources and
// NodeUnprepareResources, as a networking DRA driver (dra-driver-sriov in its Multus mode) does.
//
// Each device is one end of a veth pair it makes in the node's network namespace (the other end
// stays there, as a VF's parent would), published with the two attributes a multi-network CNI
// reads: k8s.cni.cncf.io/resourceName (what a NetworkAttachmentDefinition's
// k8s.v1.cni.cncf.io/resourceName annotation names) and k8s.cni.cncf.io/deviceID (the link's name,
// which the device CNI is handed and moves into the pod). Devices given with --bare carry neither
// attribute: a device a pod may claim that is not a network device (a GPU, say).
//
// It runs inside the node (its network and mount namespaces), registers through the kubelet's
// plugins_registry directory, and needs a kubeconfig that may write ResourceSlices.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

const (
	resourceNameAttribute = "k8s.cni.cncf.io/resourceName"
	deviceIDAttribute     = "k8s.cni.cncf.io/deviceID"
)

// device is one published device: its name in the slice, the link that is the device (empty for
// a bare device) and the resource it belongs to.
type device struct {
	name         string
	link         string
	resourceName string
}

type driver struct {
	devices map[string]device
	// Where device-info files are written; empty: none.
	devinfo string
}

func main() {
	var (
		kubeconfig = flag.String("kubeconfig", "", "a kubeconfig allowed to write ResourceSlices")
		node       = flag.String("node", "", "this node's name")
		name       = flag.String("driver-name", "net.yh-genie.test", "the driver's name, as DeviceClasses select it")
		specs      = flag.String("devices", "yh-genie.test/vf=2", "RESOURCE=COUNT,...: COUNT links per resource name")
		bare       = flag.Int("bare", 0, "devices without the CNI attributes")
		devinfo    = flag.String("devinfo", "", "where to write the links' device-info files, as a device plugin does (none: not written)")
	)
	klog.InitFlags(nil)
	flag.Parse()
	if *kubeconfig == "" || *node == "" {
		fail(fmt.Errorf("--kubeconfig and --node are required"))
	}
	devices, err := parseDevices(*specs, *bare)
	if err != nil {
		fail(err)
	}
	for _, d := range devices {
		if err := ensureLink(d.link); err != nil {
			fail(err)
		}
	}
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail(err)
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		fail(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	dir := "/var/lib/kubelet/plugins/" + *name
	if err := os.MkdirAll(dir, 0o750); err != nil {
		fail(err)
	}
	plugin := &driver{devices: map[string]device{}, devinfo: *devinfo}
	for _, d := range devices {
		plugin.devices[d.name] = d
	}
	helper, err := kubeletplugin.Start(ctx, plugin,
		kubeletplugin.KubeClient(client),
		kubeletplugin.NodeName(*node),
		kubeletplugin.DriverName(*name),
		kubeletplugin.PluginDataDirectoryPath(dir),
		kubeletplugin.RegistrarDirectoryPath("/var/lib/kubelet/plugins_registry"),
	)
	if err != nil {
		fail(err)
	}
	defer helper.Stop()
	slice := resourceslice.Slice{}
	for _, d := range devices {
		// "kind" (in the driver's own domain) lets a claim pick links or bare devices.
		kind := "bare"
		if d.link != "" {
			kind = "link"
		}
		published := resourceapi.Device{
			Name:       d.name,
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"kind": {StringValue: ptr.To(kind)}},
		}
		if d.link != "" {
			published.Attributes[resourceNameAttribute] = resourceapi.DeviceAttribute{StringValue: ptr.To(d.resourceName)}
			published.Attributes[deviceIDAttribute] = resourceapi.DeviceAttribute{StringValue: ptr.To(d.link)}
		}
		slice.Devices = append(slice.Devices, published)
	}
	resources := resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{*node: {Slices: []resourceslice.Slice{slice}}}}
	if err := helper.PublishResources(ctx, resources); err != nil {
		fail(err)
	}
	fmt.Printf("driver %s on node %s: published %d devices\n", *name, *node, len(devices))
	<-ctx.Done()
}

// parseDevices reads "yh-genie.test/vf=2,yh-genie.test/red=1": links vf0, vf1 and red0 (the last
// segment of the resource name, numbered), devices vf-0, vf-1, red-0; then `bare` devices bare-N.
func parseDevices(specs string, bare int) ([]device, error) {
	var devices []device
	for _, spec := range strings.Split(specs, ",") {
		if spec == "" {
			continue
		}
		resourceName, count, ok := strings.Cut(spec, "=")
		n, err := strconv.Atoi(count)
		if !ok || err != nil || n < 0 {
			return nil, fmt.Errorf("--devices: %q is not RESOURCE=COUNT", spec)
		}
		base := resourceName[strings.LastIndex(resourceName, "/")+1:]
		for i := 0; i < n; i++ {
			devices = append(devices, device{
				name:         fmt.Sprintf("%s-%d", base, i),
				link:         fmt.Sprintf("%s%d", base, i),
				resourceName: resourceName,
			})
		}
	}
	for i := 0; i < bare; i++ {
		devices = append(devices, device{name: fmt.Sprintf("bare-%d", i)})
	}
	return devices, nil
}

// ensureLink makes the veth pair LINK / LINKp in the node's network namespace unless LINK is
// there (in the node: not in a pod, where the device CNI moved it).
func ensureLink(link string) error {
	if link == "" || exec.Command("ip", "link", "show", link).Run() == nil {
		return nil
	}
	out, err := exec.Command("ip", "link", "add", link, "type", "veth", "peer", "name", link+"p").CombinedOutput()
	if err != nil {
		return fmt.Errorf("making link %s: %v: %s", link, err, out)
	}
	return nil
}

// PrepareResourceClaims hands the kubelet each claim's devices of this driver (no CDI devices: the
// device CNI, not the runtime, gives the pod its link). A link that is gone (its pod's netns took
// it down with it) is made again.
func (d *driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	results := map[types.UID]kubeletplugin.PrepareResult{}
	for _, claim := range claims {
		var result kubeletplugin.PrepareResult
		if claim.Status.Allocation == nil {
			result.Err = fmt.Errorf("claim %s/%s is not allocated", claim.Namespace, claim.Name)
			results[claim.UID] = result
			continue
		}
		for _, allocated := range claim.Status.Allocation.Devices.Results {
			dev, ok := d.devices[allocated.Device]
			if !ok {
				continue // another driver's device
			}
			if dev.link != "" {
				if err := ensureLink(dev.link); err != nil {
					result.Err = err
					break
				}
				if err := d.writeDeviceInfo(dev); err != nil {
					result.Err = err
					break
				}
			}
			result.Devices = append(result.Devices, kubeletplugin.Device{
				Requests:   []string{allocated.Request},
				PoolName:   allocated.Pool,
				DeviceName: allocated.Device,
			})
		}
		results[claim.UID] = result
	}
	return results, nil
}

// writeDeviceInfo writes the device-info file of a link where the SR-IOV device plugin writes its
// VFs' (<devinfo>/dp/<resource name, / as ->-<device ID>-device.json), which the selector copies
// for the attachment and reports in the pod's network-status.
func (d *driver) writeDeviceInfo(dev device) error {
	if d.devinfo == "" {
		return nil
	}
	dir := filepath.Join(d.devinfo, "dp")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	name := strings.ReplaceAll(dev.resourceName, "/", "-") + "-" + dev.link + "-device.json"
	info := fmt.Sprintf(`{"type":"pci","version":"1.1.0","pci":{"pci-address":%q}}`, dev.link)
	return os.WriteFile(filepath.Join(dir, name), []byte(info), 0o644)
}

// UnprepareResourceClaims has nothing to undo: the device CNI gives the link back on DEL.
func (d *driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	results := map[types.UID]error{}
	for _, claim := range claims {
		results[claim.UID] = nil
	}
	return results, nil
}

func (d *driver) HandleError(ctx context.Context, err error, msg string) {
	fmt.Fprintf(os.Stderr, "%s: %v\n", msg, err)
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "yh-genie-test-dra-driver: %v\n", err)
	os.Exit(1)
}
