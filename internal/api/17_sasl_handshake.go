package api

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sushka-io/sushka/internal/server"
)

// SaslHandshake: v0-1
//
// Behavior (KIP-43, KIP-152; the exchange is internal/sasl, the gating
// internal/server/sasl.go):
// * On a SASL_PLAINTEXT or SASL_SSL listener, chooses the mechanism of the
//   connection's authentication; SupportedMechanisms always lists the
//   enabled ones (--sasl-enabled-mechanisms). A mechanism that is not
//   enabled is UNSUPPORTED_SASL_MECHANISM, a handshake out of turn (a
//   second one before SaslAuthenticate ended the first) ILLEGAL_SASL_STATE;
//   both close the connection after connection.failed.authentication.delay.
// * v0: the tokens that follow are bare length-prefixed frames, without a
//   request header, answered the same way (the server reads them as
//   SaslAuthenticate requests marked RawSASL), as Kafka's
//   SaslServerAuthenticator does for kafka-python 2.0 and sarama's
//   SASLHandshakeV0. v1: the tokens come in SaslAuthenticate requests.
// * On an authenticated connection a v1 handshake begins a
//   re-authentication (KIP-368) with the same mechanism.
// * On a listener without SASL: ILLEGAL_SASL_STATE, the connection stays
//   open, as Kafka's KafkaApis answers.
//
// Version notes:
// * v1: tokens in SaslAuthenticate (KIP-152)

func init() { regKey(17, 0, 1, (*Handler).handleSaslHandshake) }

func (h *Handler) handleSaslHandshake(ctx context.Context, creq *server.Request, req *kmsg.SASLHandshakeRequest) server.Response {
	resp := req.ResponseKind().(*kmsg.SASLHandshakeResponse)
	resp.SupportedMechanisms = h.sasl.Mechanisms()
	ex := h.saslExchange(creq)
	if ex == nil {
		resp.ErrorCode = kerr.IllegalSaslState.Code
		return reply(resp)
	}
	if creq.Session.Authenticated() && req.Version == 0 {
		// Re-authentication needs SaslAuthenticate v1+ (KIP-368).
		resp.ErrorCode = kerr.IllegalSaslState.Code
		h.log.Info("closing connection: SaslHandshake v0 on an authenticated connection", "client", creq.Remote, "principal", creq.Principal())
		return h.failedAuthentication(ctx, reply(resp))
	}
	if err := ex.Handshake(req.Mechanism); err != nil {
		resp.ErrorCode = errorCode(err)
		h.log.Info("closing connection: SASL handshake refused", "client", creq.Remote, "listener", creq.Session.Listener, "err", err)
		return h.failedAuthentication(ctx, reply(resp))
	}
	if req.Version == 0 {
		creq.Session.ExpectRawSASLTokens(true)
	}
	return reply(resp)
}
