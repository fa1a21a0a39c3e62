// Command samlidp is the SAML identity provider of the end-to-end tests:
// crewjam/saml's samlidp on a loopback address. e2e/run registers the
// exchange's service provider and the users through its admin endpoints
// (PUT /services/{id}, PUT /users/{name}).
//
// Usage: samlidp 127.0.0.1:<port>
package main

import (
	"fmt"
	"log"
	"net/http"
	"os"

	"exchange/oauth/oauthtest"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: samlidp <host:port>")
		os.Exit(2)
	}
	addr := os.Args[1]
	idp, err := oauthtest.NewSAMLIdP("http://" + addr)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("samlidp listening on http://%s", addr)
	log.Fatal(http.ListenAndServe(addr, idp.Server))
}
