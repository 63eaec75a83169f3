package ctl

import "io"

// SealBackup writes tarStream as the body of a backup under passphrase,
// as codumentorctl backup would: tests craft archives a backup never
// holds and check that restore refuses them.
func SealBackup(w io.Writer, passphrase string, tarStream []byte) error {
	sw, err := newSealWriter(w, backupHeader{KDF: kdfPassphrase}, passphrase)
	if err != nil {
		return err
	}
	if _, err := sw.Write(tarStream); err != nil {
		return err
	}
	return sw.Close()
}
