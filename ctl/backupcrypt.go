package ctl

import (
	"bufio"
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"golang.org/x/crypto/argon2"
)

// A backup file is a header line, then the archive in AES-256-GCM chunks
// (the STREAM construction: each chunk's nonce is its number, and the
// last is marked, so that reordered, dropped or appended chunks fail):
//
//	{"format":"codumentor-backup","version":1,"kdf":"jwt_secret"|"passphrase",...}\n
//	uint32 length ‖ sealed chunk, ...
//
// The key is derived from auth.jwt_secret (HKDF-SHA256) or from a
// passphrase (Argon2id), with the header's random salt; the header is
// authenticated with every chunk.

const (
	backupFormat  = "codumentor-backup"
	kdfJWT        = "jwt_secret"
	kdfPassphrase = "passphrase"
	// chunkSize is the plaintext of one sealed chunk.
	chunkSize = 1 << 20
)

type backupHeader struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	KDF     string `json:"kdf"`
	Salt    []byte `json:"salt"`
	// KeyID names the jwt_secret (its key ID, as secrets status shows
	// it), never the secret.
	KeyID string `json:"key_id,omitempty"`
	// Store is the backend of the database in the archive: empty for
	// SQLite (data/codumentor.db), "postgres" for a PostgreSQL
	// deployment's dump (data/database.jsonl, see dumpPostgres).
	Store string `json:"store,omitempty"`
	// Argon2id parameters, for a passphrase.
	Time    uint32 `json:"time,omitempty"`
	Memory  uint32 `json:"memory_kib,omitempty"`
	Threads uint8  `json:"threads,omitempty"`
}

// ErrBadKey is wrapped when a backup does not open with the key given.
var ErrBadKey = errors.New("the backup does not open with this key (or it was altered)")

func (h *backupHeader) key(secret string) ([]byte, error) {
	switch h.KDF {
	case kdfJWT:
		return hkdf.Key(sha256.New, []byte(secret), h.Salt, "codumentor backup v1", 32)
	case kdfPassphrase:
		if h.Time == 0 || h.Time > 16 || h.Memory == 0 || h.Memory > 1<<20 || h.Threads == 0 {
			return nil, fmt.Errorf("backup header: Argon2id parameters out of range")
		}
		return argon2.IDKey([]byte(secret), h.Salt, h.Time, h.Memory, h.Threads, 32), nil
	}
	return nil, fmt.Errorf("backup header: unknown key derivation %q", h.KDF)
}

// sealWriter encrypts what is written to it into w.
type sealWriter struct {
	w      io.Writer
	aead   cipher.AEAD
	header []byte
	buf    []byte
	n      uint64
}

// newSealWriter writes h to w and returns the writer of the encrypted
// body; Close seals the last chunk.
func newSealWriter(w io.Writer, h backupHeader, secret string) (*sealWriter, error) {
	h.Format, h.Version = backupFormat, 1
	h.Salt = make([]byte, 16)
	rand.Read(h.Salt)
	if h.KDF == kdfPassphrase {
		h.Time, h.Memory, h.Threads = 3, 64<<10, 2
	}
	aead, err := h.aead(secret)
	if err != nil {
		return nil, err
	}
	line, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	line = append(line, '\n')
	if _, err := w.Write(line); err != nil {
		return nil, err
	}
	return &sealWriter{w: w, aead: aead, header: line, buf: make([]byte, 0, chunkSize)}, nil
}

// aead is the cipher of a backup under h, keyed from secret.
func (h *backupHeader) aead(secret string) (cipher.AEAD, error) {
	key, err := h.key(secret)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// chunkNonce and chunkAD bind a chunk to its place and to the header.
func chunkNonce(n uint64) []byte {
	nonce := make([]byte, 12)
	binary.BigEndian.PutUint64(nonce[4:], n)
	return nonce
}

func chunkAD(header []byte, last bool) []byte {
	ad := append([]byte(nil), header...)
	if last {
		return append(ad, 1)
	}
	return append(ad, 0)
}

func (s *sealWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		k := min(len(p), chunkSize-len(s.buf))
		s.buf = append(s.buf, p[:k]...)
		p = p[k:]
		if len(s.buf) == chunkSize {
			if err := s.flush(false); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

func (s *sealWriter) flush(last bool) error {
	ct := s.aead.Seal(nil, chunkNonce(s.n), s.buf, chunkAD(s.header, last))
	s.n++
	s.buf = s.buf[:0]
	var l [4]byte
	binary.BigEndian.PutUint32(l[:], uint32(len(ct)))
	if _, err := s.w.Write(l[:]); err != nil {
		return err
	}
	_, err := s.w.Write(ct)
	return err
}

// Close seals what is buffered as the last chunk.
func (s *sealWriter) Close() error { return s.flush(true) }

// readBackupHeader reads the header line of a backup.
func readBackupHeader(r *bufio.Reader) (backupHeader, []byte, error) {
	var h backupHeader
	line, err := r.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return h, nil, errors.New("not a codumentor backup (no header line)")
		}
		return h, nil, fmt.Errorf("not a codumentor backup: %w", err)
	}
	line = bytes.Clone(line)
	if err := json.Unmarshal(line, &h); err != nil || h.Format != backupFormat {
		return h, nil, errors.New("not a codumentor backup (bad header)")
	}
	if h.Version != 1 {
		return h, nil, fmt.Errorf("backup format version %d: this codumentorctl reads version 1", h.Version)
	}
	return h, line, nil
}

// openReader decrypts the body of a backup whose header was read.
type openReader struct {
	r      io.Reader
	aead   cipher.AEAD
	header []byte
	n      uint64
	buf    []byte
	done   bool
}

func newOpenReader(r io.Reader, h backupHeader, header []byte, secret string) (*openReader, error) {
	aead, err := h.aead(secret)
	if err != nil {
		return nil, err
	}
	return &openReader{r: r, aead: aead, header: header}, nil
}

func (o *openReader) Read(p []byte) (int, error) {
	for len(o.buf) == 0 {
		if o.done {
			return 0, io.EOF
		}
		if err := o.next(); err != nil {
			return 0, err
		}
	}
	n := copy(p, o.buf)
	o.buf = o.buf[n:]
	return n, nil
}

func (o *openReader) next() error {
	var l [4]byte
	if _, err := io.ReadFull(o.r, l[:]); err != nil {
		return fmt.Errorf("backup truncated before its last chunk: %w", io.ErrUnexpectedEOF)
	}
	size := binary.BigEndian.Uint32(l[:])
	if size > chunkSize+uint32(o.aead.Overhead()) {
		return errors.New("backup damaged: a chunk is larger than any this program writes")
	}
	ct := make([]byte, size)
	if _, err := io.ReadFull(o.r, ct); err != nil {
		return fmt.Errorf("backup truncated in chunk %d: %w", o.n, io.ErrUnexpectedEOF)
	}
	nonce := chunkNonce(o.n)
	pt, err := o.aead.Open(nil, nonce, ct, chunkAD(o.header, false))
	if err != nil {
		pt, err = o.aead.Open(nil, nonce, ct, chunkAD(o.header, true))
		if err != nil {
			if o.n == 0 {
				return ErrBadKey
			}
			return fmt.Errorf("backup damaged: chunk %d does not authenticate", o.n)
		}
		o.done = true
		var extra [1]byte
		if k, _ := o.r.Read(extra[:]); k > 0 {
			return errors.New("backup damaged: data after its last chunk")
		}
	}
	o.n++
	o.buf = pt
	return nil
}
