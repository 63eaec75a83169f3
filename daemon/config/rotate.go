package config

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"gopkg.in/yaml.v3"
)

// NewSecret returns a fresh auth.jwt_secret: 48 random bytes, base64url.
func NewSecret() string {
	b := make([]byte, 48)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// RotateSecret writes next as auth.jwt_secret of the config file and
// moves the current one (if any) to the front of
// auth.previous_jwt_secrets, leaving the rest of the file (comments and
// other keys) as it was. The file is replaced atomically (0600), so a
// running server that reloads it never sees half of it. It returns the
// number of previous secrets now listed.
func RotateSecret(file, next string) (int, error) {
	if len(next) < 32 {
		return 0, errors.New("the new secret is shorter than 32 bytes")
	}
	b, err := os.ReadFile(file)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, err
	}
	var doc yaml.Node
	if len(bytes.TrimSpace(b)) > 0 {
		if err := yaml.Unmarshal(b, &doc); err != nil {
			return 0, fmt.Errorf("%s: %w", file, err)
		}
	}
	if doc.Kind == 0 {
		doc = yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{{Kind: yaml.MappingNode}}}
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return 0, fmt.Errorf("%s: the top level is not a mapping", file)
	}
	authNode := child(doc.Content[0], "auth", yaml.MappingNode)
	if authNode.Kind != yaml.MappingNode {
		return 0, fmt.Errorf("%s: auth is not a mapping", file)
	}
	cur := child(authNode, "jwt_secret", yaml.ScalarNode)
	prev := child(authNode, "previous_jwt_secrets", yaml.SequenceNode)
	if prev.Kind != yaml.SequenceNode {
		// "previous_jwt_secrets:" with nothing after it is a null scalar.
		*prev = yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	}
	if cur.Value != "" {
		if cur.Value == next {
			return 0, errors.New("the new secret equals the current one")
		}
		prev.Content = append([]*yaml.Node{{Kind: yaml.ScalarNode, Tag: "!!str", Value: cur.Value}}, prev.Content...)
	}
	// Only the value changes: the node's comments (on the jwt_secret line,
	// above or below it) stay where the operator wrote them.
	cur.Kind, cur.Tag, cur.Value, cur.Style, cur.Anchor = yaml.ScalarNode, "!!str", next, 0, ""
	cur.Content = nil
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return 0, err
	}
	// The result must still be a valid configuration.
	if _, err := Parse(out.Bytes()); err != nil {
		return 0, fmt.Errorf("%s after rotation: %w", file, err)
	}
	return len(prev.Content), writeFileAtomic(file, out.Bytes())
}

// child returns the value node of key in mapping m, adding an empty one
// of kind when the key is missing.
func child(m *yaml.Node, key string, kind yaml.Kind) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	k := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}
	v := &yaml.Node{Kind: kind}
	if kind == yaml.MappingNode {
		v.Tag = "!!map"
	}
	m.Content = append(m.Content, k, v)
	return v
}

// writeFileAtomic replaces file with data through a temporary file in the
// same directory and a rename.
func writeFileAtomic(file string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(file), ".config-*.yaml")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), file)
}
