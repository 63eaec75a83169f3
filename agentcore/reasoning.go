package agentcore

// ReasoningDelta is the payload of EventReasoningDelta: a piece of a
// reasoning model's thinking (DeepSeek-R1, Qwen3 and others stream it
// before their answer), redacted and coalesced like text deltas. It is
// shown and stored, at most Config.MaxReasoning bytes of a reply, and
// never sent back to the model.
type ReasoningDelta struct {
	Text string `json:"text"`
	// Omitted, set on the reply's last reasoning_delta (whose Text is
	// empty), counts the bytes of thinking past Config.MaxReasoning that
	// were not kept.
	Omitted int `json:"omitted,omitempty"`
}
