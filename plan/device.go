package plan

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// Device is one entry of the device catalog.
type Device struct {
	Name   string
	Target Target
	// Bytes is the total memory the runtime reports for one device; 0 for the
	// CPU, whose size comes from the host or from --device-memory.
	Bytes int64
}

// gibBytes converts a GiB figure as the CUDA runtime prints it (two
// decimals) to bytes, rounded to the nearest byte.
func gibBytes(g float64) int64 { return int64(math.Round(g * float64(GiB))) }

// devices are the totals the CUDA runtime reports (torch.cuda.mem_get_info),
// which is what gpu_memory_utilization multiplies: B200 178.35 GiB,
// H200 139.81 GiB, H100 80 GB 79.19 GiB.
var devices = map[string]Device{
	"b200": {Name: "b200", Target: TargetSM100, Bytes: gibBytes(178.35)},
	"h200": {Name: "h200", Target: TargetSM90, Bytes: gibBytes(139.81)},
	"h100": {Name: "h100", Target: TargetSM90, Bytes: gibBytes(79.19)},
	"cpu":  {Name: "cpu", Target: TargetCPU},
}

// DeviceNames lists the catalog in sorted order.
func DeviceNames() []string {
	names := make([]string, 0, len(devices))
	for n := range devices {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// LookupDevice finds a catalog device by name (case-insensitive).
func LookupDevice(name string) (Device, error) {
	d, ok := devices[strings.ToLower(name)]
	if !ok {
		return Device{}, fmt.Errorf("unknown device %q; use one of %s, or give --device-memory", name, strings.Join(DeviceNames(), ", "))
	}
	return d, nil
}
