package api

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/meta"
	"github.com/sushka-io/sushka/internal/server"
)

// AlterClientQuotas: v0-1
//
// Behavior (Kafka's ClientQuotaControlManager):
// * Each entry sets (or with Remove, removes) quota keys of one entity:
//   user, client-id, or both, a null name being the <default>. Keys:
//   producer_byte_rate and consumer_byte_rate (bytes per second, whole
//   numbers) and request_percentage (percent of one handler's time;
//   internal/quota says how it is measured).
// * Each entry is answered on its own: an unknown key or entity type, a
//   value that is not positive, a fraction of a byte rate, an entity or a
//   key named twice, an empty name: INVALID_REQUEST with Kafka's message;
//   the other entries are applied. controller_mutation_rate and ip
//   entities are refused the same way (not enforced by Sushka).
// * The records of every valid entry are one batch of the metadata log,
//   fsynced before the answer (durable, replayed at start-up); the quotas
//   apply to the next request. ValidateOnly checks and changes nothing.
// * More entries than MaxPartitionsPerRequest close the connection.
//
// Version notes:
// * v1: flexible versions

func init() { regKey(49, 0, 1, (*Handler).handleAlterClientQuotas) }

func (h *Handler) handleAlterClientQuotas(_ context.Context, creq *server.Request, req *kmsg.AlterClientQuotasRequest) server.Response {
	if refused, ok := h.tooManyPartitions(creq, len(req.Entries)); ok {
		return refused
	}
	resp := req.ResponseKind().(*kmsg.AlterClientQuotasResponse)
	alts := make([]meta.QuotaAlteration, len(req.Entries))
	for i, e := range req.Entries {
		for _, p := range e.Entity {
			alts[i].Entity = append(alts[i].Entity, meta.QuotaEntityPart{Type: p.Type, Name: p.Name})
		}
		for _, op := range e.Ops {
			o := meta.QuotaOp{Key: op.Key}
			if !op.Remove {
				v := op.Value
				o.Value = &v
			}
			alts[i].Ops = append(alts[i].Ops, o)
		}
	}
	// Under adminMu, so the quotas enforced follow the catalogue's order
	// of changes.
	var errs []error
	if cm := h.clusterMeta(); cm != nil {
		errs = h.alterQuotasInCluster(cm, alts, req.ValidateOnly)
	} else {
		h.adminMu.Lock()
		errs = h.cfg.Catalog.AlterClientQuotas(alts, req.ValidateOnly)
		if !req.ValidateOnly {
			h.quotas.SetQuotas(h.cfg.Catalog.ClientQuotas())
		}
		h.adminMu.Unlock()
	}
	for i, e := range req.Entries {
		re := kmsg.NewAlterClientQuotasResponseEntry()
		for _, p := range e.Entity {
			ee := kmsg.NewAlterClientQuotasResponseEntryEntity()
			ee.Type, ee.Name = p.Type, p.Name
			re.Entity = append(re.Entity, ee)
		}
		if errs[i] != nil {
			re.ErrorCode = errorCode(errs[i])
			re.ErrorMessage = errMessage(errs[i])
		}
		resp.Entries = append(resp.Entries, re)
	}
	return server.Response{Body: resp}
}
