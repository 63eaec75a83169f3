package daemon

import (
	"context"
	"os"
	"strings"

	"github.com/codumentor/codumentor/daemon/api"
	"github.com/codumentor/codumentor/daemon/config"
	"github.com/codumentor/codumentor/daemon/store"
)

// hostReadOnly tells the engine which conversations are host read-only
// investigations; nil (none) unless investigation.enabled.
func hostReadOnly(cfg config.Config, convs *store.Conversations) func(ctx context.Context, user, conversation string) (bool, error) {
	if !cfg.Investigation.Enabled {
		return nil
	}
	return convs.HostReadOnly
}

// hostMasks are hidden from an investigation's view besides the
// profile's own (config.HostMasks): the instance directory, the
// configuration file in use (configFile, "" for the instance's), the
// files it names, and the server binary's directory when it holds more
// than programs.
func hostMasks(inst config.Instance, configFile string, cfg config.Config) []string {
	exe, err := os.Executable()
	if err != nil {
		exe = ""
	}
	return config.HostMasks(inst, configFile, cfg, exe)
}

// investigationCheck lists what investigations do not see, for GET
// /api/v1/admin/doctor.
func investigationCheck(masks []string) api.Check {
	return api.Check{Name: "investigation/masks", OK: true, Detail: "hidden from host read-only investigations, besides other users' homes, the service user's home, /run and /var/lib: " + strings.Join(masks, ", ")}
}
