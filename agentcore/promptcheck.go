package agentcore

import (
	"errors"
	"fmt"
	"text/template"
	"text/template/parse"
)

// ErrPromptTooCostly wraps why a system prompt template is refused as
// one whose rendering could take unbounded time or memory: a model
// profile's template is a user's, executed at every model call.
var ErrPromptTooCostly = errors.New("agentcore: the system prompt template could be too costly to render")

// promptCalls are the functions a template may call: join (with a
// literal separator, so that no value grows by feeding it back) and
// builtins that only compare or count. printf could pad to any width,
// print and variables could double a string per action.
var promptCalls = map[string]bool{"join": true, "and": true, "or": true, "not": true, "eq": true, "ne": true, "lt": true, "le": true, "gt": true, "ge": true, "len": true, "index": true}

// checkPromptCost refuses a template whose rendering is not bounded by
// its size times the length of PromptData's lists: a range only over a
// field, never nested; no templates defined or called; only
// promptCalls.
func checkPromptCost(t *template.Template) error {
	if len(t.Templates()) > 1 {
		return fmt.Errorf("%w: define and block are not allowed", ErrPromptTooCostly)
	}
	if t.Tree == nil {
		return nil
	}
	return checkNode(t.Tree.Root, 0)
}

func checkNode(n parse.Node, ranges int) error {
	switch n := n.(type) {
	case nil:
		return nil
	case *parse.ListNode:
		if n == nil {
			return nil
		}
		for _, c := range n.Nodes {
			if err := checkNode(c, ranges); err != nil {
				return err
			}
		}
	case *parse.TextNode, *parse.CommentNode, *parse.BreakNode, *parse.ContinueNode:
	case *parse.ActionNode:
		return checkPipe(n.Pipe)
	case *parse.IfNode:
		return checkBranch(&n.BranchNode, ranges)
	case *parse.WithNode:
		return checkBranch(&n.BranchNode, ranges)
	case *parse.RangeNode:
		if ranges > 0 {
			return fmt.Errorf("%w: a range inside a range (%s)", ErrPromptTooCostly, n.Pipe)
		}
		if !rangesOverField(n.Pipe) {
			return fmt.Errorf("%w: range over %s: only over a field, such as .Tools", ErrPromptTooCostly, n.Pipe)
		}
		if err := checkPipe(n.Pipe); err != nil {
			return err
		}
		if err := checkNode(n.List, ranges+1); err != nil {
			return err
		}
		return checkNode(n.ElseList, ranges)
	default:
		return fmt.Errorf("%w: %s is not allowed", ErrPromptTooCostly, n)
	}
	return nil
}

func checkBranch(b *parse.BranchNode, ranges int) error {
	if err := checkPipe(b.Pipe); err != nil {
		return err
	}
	if err := checkNode(b.List, ranges); err != nil {
		return err
	}
	return checkNode(b.ElseList, ranges)
}

// rangesOverField: the pipeline is one field (.Tools, $.Tools, $x.F).
func rangesOverField(p *parse.PipeNode) bool {
	if len(p.Cmds) != 1 || len(p.Cmds[0].Args) != 1 {
		return false
	}
	switch a := p.Cmds[0].Args[0].(type) {
	case *parse.FieldNode:
		return true
	case *parse.VariableNode:
		return len(a.Ident) > 1
	}
	return false
}

func checkPipe(p *parse.PipeNode) error {
	if p == nil {
		return nil
	}
	for _, c := range p.Cmds {
		for i, a := range c.Args {
			switch a := a.(type) {
			case *parse.IdentifierNode:
				if !promptCalls[a.Ident] {
					return fmt.Errorf("%w: the function %s is not allowed (only %s)", ErrPromptTooCostly, a.Ident, "join, and, or, not, eq, ne, lt, le, gt, ge, len, index")
				}
				if a.Ident == "join" && (i != 0 || len(c.Args) != 3 || c.Args[2].Type() != parse.NodeString) {
					return fmt.Errorf("%w: %s: join takes a list and a quoted separator", ErrPromptTooCostly, c)
				}
			case *parse.PipeNode:
				if err := checkPipe(a); err != nil {
					return err
				}
			case *parse.ChainNode:
				if pn, ok := a.Node.(*parse.PipeNode); ok {
					if err := checkPipe(pn); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}
