package audit

import "context"

// actorKey is the context key of an actor.
type actorKey struct{}

type actor struct{ user, conversation string }

// ForConversation returns ctx naming the user and conversation an action
// is done for, where the code that records it (e.g. a sandbox's launch,
// deep in an integration) does not otherwise know them; conversation
// is empty for an administrator's action on the instance's behalf (an
// instance secret).
func ForConversation(ctx context.Context, user, conversation string) context.Context {
	return context.WithValue(ctx, actorKey{}, actor{user, conversation})
}

// ConversationOf returns what ForConversation put in ctx: "", "" when
// nothing did (an action of the server itself).
func ConversationOf(ctx context.Context) (user, conversation string) {
	a, _ := ctx.Value(actorKey{}).(actor)
	return a.user, a.conversation
}
