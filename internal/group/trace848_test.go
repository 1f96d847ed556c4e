package group

import "github.com/twmb/franz-go/pkg/kmsg"

func (h *harness) run848(cmd string, args map[string]string) kmsg.Request { return nil }
