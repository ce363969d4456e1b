package serfcluster

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
)

// A state document served to peers of an encrypted cluster is sealed with the gossip keyring's primary key
// (AES-GCM), so that the HTTP pull is as private and as authenticated as the gossip itself. The layout is
//
//	"DSC1" | key id (first 8 bytes of SHA-256 of the key) | 12-byte nonce | ciphertext and tag
//
// and the additional data binds it to the puller's random challenge, so a recorded old document cannot be
// replayed to bring back keys whose tombstones have since expired.
const (
	sealMagic     = "DSC1"
	sealKeyIDLen  = 8
	sealNonceLen  = 12
	sealHeaderLen = len(sealMagic) + sealKeyIDLen + sealNonceLen
	sealOverhead  = sealHeaderLen + 16
	// challengeLen is the size of the puller's challenge, sent hex-encoded in challengeHeader.
	challengeLen    = 16
	challengeHeader = "Duet-Cluster-Challenge"
	sealedType      = "application/vnd.duet.cluster-state.sealed"
	sealAAD         = "duet serfcluster state v1\x00"
)

func keyID(key []byte) []byte {
	sum := sha256.Sum256(key)
	return sum[:sealKeyIDLen]
}

func gcmFor(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

func seal(key, challenge, plain []byte) ([]byte, error) {
	gcm, err := gcmFor(key)
	if err != nil {
		return nil, err
	}
	out := make([]byte, sealHeaderLen, sealOverhead+len(plain))
	copy(out, sealMagic)
	copy(out[len(sealMagic):], keyID(key))
	nonce := out[len(sealMagic)+sealKeyIDLen : sealHeaderLen]
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return gcm.Seal(out, nonce, plain, append([]byte(sealAAD), challenge...)), nil
}

func unseal(keys [][]byte, challenge, sealed []byte) ([]byte, error) {
	if len(sealed) < sealOverhead || string(sealed[:len(sealMagic)]) != sealMagic {
		return nil, errors.New("sealed state: bad header")
	}
	id := sealed[len(sealMagic) : len(sealMagic)+sealKeyIDLen]
	for _, k := range keys {
		if !bytes.Equal(keyID(k), id) {
			continue
		}
		gcm, err := gcmFor(k)
		if err != nil {
			return nil, err
		}
		nonce := sealed[len(sealMagic)+sealKeyIDLen : sealHeaderLen]
		plain, err := gcm.Open(nil, nonce, sealed[sealHeaderLen:], append([]byte(sealAAD), challenge...))
		if err != nil {
			return nil, fmt.Errorf("sealed state: %w (wrong challenge or tampered body)", err)
		}
		return plain, nil
	}
	return nil, fmt.Errorf("sealed state: key %x is not in this node's keyring", id)
}
