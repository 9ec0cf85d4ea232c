// Secret scrubbing: every kind of secret is redacted wherever it sits in a string or a JSON value, and
// for each kind a near miss (same shape, not a secret) survives untouched, so the tests can fail.
#include "records/scrub.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

#include "test_util.hpp"

using nlohmann::json;
using supervisor::Scrubber;
using supervisor::ScrubOptions;

namespace {

struct Planted {
  const char* label;   // expected "[REDACTED:<label>]"
  std::string text;    // as it would appear in a brief, a tool result or a reply
  std::string secret;  // the part that must not survive
};

// Fake credentials shaped like real ones (none of them is valid anywhere).
const std::vector<Planted>& planted() {
  static const std::vector<Planted> p = {
      {"openai_key", "sk-proj-Tq3vX9bK2mLr8sYw4ZcA1nDf6HgJ0pQe5RtUy7IoPa",
       "Tq3vX9bK2mLr8sYw4ZcA1nDf6HgJ0pQe5RtUy7IoPa"},
      {"openai_key", "sk-9fKq2LmN4pRs6TuV8wXy0ZaB1cDe3FgH5iJk7LmN9oPq", "9fKq2LmN4pRs6TuV8wXy0ZaB1cDe3FgH5iJk7LmN9oPq"},
      {"anthropic_key", "sk-ant-api03-Zx8Cv7Bn6Mm5Ll4Kk3Jj2Hh1Gg0Ff9Ee8Dd7Cc6Bb5Aa-Qq4Ww3AA",
       "Zx8Cv7Bn6Mm5Ll4Kk3Jj2Hh1Gg0Ff9Ee8Dd7Cc6Bb5Aa"},
      {"xai_key", "xai-R4nD0mK3yV4lu3F0rT3st1ngPurp0s3sOnly99", "R4nD0mK3yV4lu3F0rT3st1ngPurp0s3sOnly99"},
      {"groq_key", "gsk_8hJ3kL9mN2pQ4rS6tU8vW0xY1zA3bC5dE7fG9h", "8hJ3kL9mN2pQ4rS6tU8vW0xY1zA3bC5dE7fG9h"},
      {"huggingface_token", "hf_QwErTyUiOpAsDfGhJkLzXcVbNm12345678", "QwErTyUiOpAsDfGhJkLzXcVbNm12345678"},
      {"github_token", "ghp_1a2B3c4D5e6F7g8H9i0J1k2L3m4N5o6P7q8R", "1a2B3c4D5e6F7g8H9i0J1k2L3m4N5o6P7q8R"},
      {"github_token", "gho_Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2Rr1Qq0Pp9Oo8N", "Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2Rr1Qq0Pp9Oo8N"},
      {"github_token", "ghu_Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8Qr9St0Uv1Wx2Y", "Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8Qr9St0Uv1Wx2Y"},
      {"github_token", "ghs_Mn0Bv9Cx8Zl7Kj6Hg5Fd4Sa3Po2Iu1Yt0Re9W", "Mn0Bv9Cx8Zl7Kj6Hg5Fd4Sa3Po2Iu1Yt0Re9W"},
      {"github_token", "ghr_Qa1Ws2Ed3Rf4Tg5Yh6Uj7Ik8Ol9P0Za1Xs2Dc", "Qa1Ws2Ed3Rf4Tg5Yh6Uj7Ik8Ol9P0Za1Xs2Dc"},
      {"github_token", "github_pat_11ABCDEFG0aBcDeFgHiJkL_mNoPqRsTuVwXyZ0123456789abcdefGHIJ",
       "11ABCDEFG0aBcDeFgHiJkL_mNoPqRsTuVwXyZ0123456789abcdefGHIJ"},
      {"slack_token", "xoxb-2048123456-4096123456789-QwErTyUiOpAsDfGhJkLzXcVb",
       "2048123456-4096123456789-QwErTyUiOpAsDfGhJkLzXcVb"},
      {"slack_token", "xoxp-1111222233-4444555566-QwE9rTy8UiO7pAs6", "1111222233-4444555566-QwE9rTy8UiO7pAs6"},
      {"aws_access_key_id", "AKIAQX3KZ7LM2NP4RS6T", "QX3KZ7LM2NP4RS6T"},
      {"aws_access_key_id", "ASIAZ9Y8X7W6V5U4T3S2", "Z9Y8X7W6V5U4T3S2"},
      {"aws_secret_key", "aws_secret_access_key = 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",
       "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzQ8mPl3Vt4"},
      {"aws_secret_key", "\"SecretAccessKey\": \"Hq9/Lm3+Tr5Wx7Zc1Vb3Nm5Aq7Sd9Fg1Hj3Kl5Pz\"",
       "Hq9/Lm3+Tr5Wx7Zc1Vb3Nm5Aq7Sd9Fg1Hj3Kl5Pz"},
      {"authorization", "Authorization: Bearer q8Zr4Lm2Nx6Vb0Tc9Yh3Wd7Ke5Fs1Pj", "q8Zr4Lm2Nx6Vb0Tc9Yh3Wd7Ke5Fs1Pj"},
      {"authorization", "authorization: Basic dXNlcjpodW50ZXJodW50ZXI=", "dXNlcjpodW50ZXJodW50ZXI="},
      {"api_key", "x-api-key: 7f3e9a1c5b2d8e4f6a0c9b7d5e3f1a2c", "7f3e9a1c5b2d8e4f6a0c9b7d5e3f1a2c"},
      {"bearer_token", "token was bearer Zq7Xw3Vu9Ts5Rq1Po8Nm4Lk2Jh6Gf0Ed", "Zq7Xw3Vu9Ts5Rq1Po8Nm4Lk2Jh6Gf0Ed"},
      {"private_key",
       "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
       "QyNTUxOQAAACBdEaDbEeFfAkEkEyMaTeRiAl0123456789abcdefQ==\n-----END OPENSSH PRIVATE KEY-----",
       "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ"},
      {"private_key",
       "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAq1w2e3r4t5y6u7i8o9p0aSdFgHjKlZxCvBnM\n-----END RSA PRIVATE "
       "KEY-----",
       "MIIEowIBAAKCAQEAq1w2e3r4t5y6u7i8o9p0aSdFgHjKlZxCvBnM"},
  };
  return p;
}

// Same shapes, not secrets: each must come out exactly as it went in.
const std::vector<std::string>& near_misses() {
  static const std::vector<std::string> n = {
      "the task-abcdefghijklmnopqrstuvwxyz0123 is done",  // "sk-" inside a word
      "sk-short",
      "use an sk- prefix for keys",
      "Bearer authentication is required here",
      "Authorization: required",
      "the password: see the vault",
      "AKIA is the prefix of AWS access key ids",
      "ghp_short and gho_ too",
      "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA\n-----END PUBLIC KEY-----",
      "input_tokens: 1234567890",
      "path /home/user/.ssh/id_ed25519 and ~/.aws/credentials",
      "x-api-key: $OPENAI_API_KEY",
      "hf_hub_download(repo_id)",
      "max_tokens = 4096; secret sauce",
  };
  return n;
}

}  // namespace

TEST_CASE("every planted kind is redacted inside longer text, with its label; the text around it survives") {
  Scrubber s;
  for (const auto& p : planted()) {
    CAPTURE(p.text);
    const std::string in = "before «" + p.text + "» after";
    const std::string out = s.scrub(in);
    CHECK(out.find(p.secret) == std::string::npos);
    CHECK(out.find(std::string("[REDACTED:") + p.label + "]") != std::string::npos);
    CHECK(out.rfind("before «", 0) == 0);
    CHECK(out.find("» after") != std::string::npos);
    CHECK(s.contains_secret(in));
  }
}

TEST_CASE("near misses of every kind survive byte for byte (the twin of the planted test)") {
  Scrubber s;
  for (const auto& n : near_misses()) {
    CAPTURE(n);
    CHECK(s.scrub(n) == n);
    CHECK_FALSE(s.contains_secret(n));
  }
}

TEST_CASE("header labels are kept, only the credential goes") {
  Scrubber s;
  CHECK(s.scrub("curl -H 'Authorization: Bearer q8Zr4Lm2Nx6Vb0Tc9Yh3Wd7Ke5Fs1Pj' https://x") ==
        "curl -H 'Authorization: [REDACTED:authorization]' https://x");
  CHECK(s.scrub("x-api-key=7f3e9a1c5b2d8e4f") == "x-api-key=[REDACTED:api_key]");
  CHECK(s.scrub("{\"password\": \"hunter2hunter2\"}") == "{\"password\": \"[REDACTED:labelled_secret]\"}");
}

TEST_CASE("several secrets in one string, adjacent and repeated") {
  Scrubber s;
  const std::string a = "sk-proj-Tq3vX9bK2mLr8sYw4ZcA1nDf6HgJ0pQe5RtUy7IoPa", b = "AKIAQX3KZ7LM2NP4RS6T";
  CHECK(s.scrub(a + " " + b + " " + a) == "[REDACTED:openai_key] [REDACTED:aws_access_key_id] [REDACTED:openai_key]");
  CHECK(s.scrub(b + "," + b) == "[REDACTED:aws_access_key_id],[REDACTED:aws_access_key_id]");
}

TEST_CASE("a private key block cut off before its END line is redacted to the end") {
  Scrubber s;
  std::string cut = "head\n-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBkg4LVWM9nuwNSk3yByxZpYRTBnVJk5oBq";
  CHECK(s.scrub(cut) == "head\n[REDACTED:private_key]");
  // JSON-escaped, as it appears inside a log line.
  std::string escaped = R"({"c":"-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBg\n-----END PRIVATE KEY-----\n"})";
  CHECK(s.scrub(escaped) == R"({"c":"[REDACTED:private_key]\n"})");
}

TEST_CASE("invalid UTF-8 around a secret does not hide it") {
  Scrubber s;
  std::string in = "\xff\xfe ghp_1a2B3c4D5e6F7g8H9i0J1k2L3m4N5o6P7q8R \xc3";
  CHECK(s.scrub(in) == "\xff\xfe [REDACTED:github_token] \xc3");
}

TEST_CASE("secret-looking environment values are redacted; short and innocent ones are not") {
  std::string e1 = "MY_SERVICE_TOKEN=plain-looking-value-42", e2 = "SHORT_KEY=1", e3 = "PATH=/usr/local/bin:/usr/bin",
              e4 = "DB_PASSWORD=correct horse battery", e5 = "HOME=/root", e6 = "Vendor_Credentials=Zm9vYmFyYmF6cXV4",
              e7 = "TOKEN_CACHE=disabled", e8 = "SSH_KEY_PATH=/home/me/.ssh/id_ed25519", e9 = "KEY_COUNT=100000000";
  char* envp[] = {e1.data(), e2.data(), e3.data(), e4.data(), e5.data(),
                  e6.data(), e7.data(), e8.data(), e9.data(), nullptr};
  ScrubOptions o;
  o.envp = envp;
  Scrubber s(o);
  CHECK(s.scrub("value plain-looking-value-42 here") == "value [REDACTED:env:MY_SERVICE_TOKEN] here");
  CHECK(s.scrub("pw=correct horse battery;") == "pw=[REDACTED:env:DB_PASSWORD];");
  CHECK(s.scrub("Zm9vYmFyYmF6cXV4") == "[REDACTED:env:Vendor_Credentials]");
  // The twin: values of variables that do not look secret, and a too-short value, survive.
  CHECK(s.scrub("1 /usr/local/bin:/usr/bin /root") == "1 /usr/local/bin:/usr/bin /root");
  // Settings under secret-looking names: a word, a path, a number.
  CHECK(s.scrub("cache disabled, key /home/me/.ssh/id_ed25519, 100000000 keys") ==
        "cache disabled, key /home/me/.ssh/id_ed25519, 100000000 keys");
  auto names = s.environment_names();
  CHECK(std::find(names.begin(), names.end(), "MY_SERVICE_TOKEN") != names.end());
  CHECK(std::find(names.begin(), names.end(), "SHORT_KEY") == names.end());
  CHECK(std::find(names.begin(), names.end(), "PATH") == names.end());
}

TEST_CASE("operator literals are redacted wherever they appear, longest first, regex characters literal") {
  ScrubOptions o;
  o.from_environment = false;
  o.literals = {"acme-internal-42", "acme-internal-42-extended", "a.b*c(d)", ""};
  Scrubber s(o);
  CHECK(s.literal_count() == 3);
  CHECK(s.scrub("x acme-internal-42-extended y") == "x [REDACTED:operator_value] y");
  CHECK(s.scrub("xacme-internal-42y") == "x[REDACTED:operator_value]y");
  CHECK(s.scrub("a.b*c(d)") == "[REDACTED:operator_value]");
  CHECK(s.scrub("aXb*c(d) acme-internal-4") == "aXb*c(d) acme-internal-4");
}

TEST_CASE("JSON: values, nested arrays, keys, and credential-named fields") {
  Scrubber s;
  json in = {{"brief", "use sk-proj-Tq3vX9bK2mLr8sYw4ZcA1nDf6HgJ0pQe5RtUy7IoPa please"},
             {"list", {"ok", {{"deep", "AKIAQX3KZ7LM2NP4RS6T"}}}},
             {"headers", {{"x-api-key", "plainvalue-without-shape"}, {"Authorization", "Token abcdefghij"}}},
             {"ghp_1a2B3c4D5e6F7g8H9i0J1k2L3m4N5o6P7q8R", 1},
             {"input_tokens", 1234},
             {"keywords", "alpha beta gamma delta"},
             {"client_secret", 12345678}};
  json out = s.scrub_json(in);
  std::string dumped = out.dump();
  CHECK(dumped.find("Tq3vX9bK2mLr8sYw4ZcA1nDf6HgJ0pQe5RtUy7IoPa") == std::string::npos);
  CHECK(dumped.find("QX3KZ7LM2NP4RS6T") == std::string::npos);
  CHECK(dumped.find("plainvalue-without-shape") == std::string::npos);
  CHECK(dumped.find("abcdefghij") == std::string::npos);
  CHECK(dumped.find("1a2B3c4D5e6F7g8H9i0J") == std::string::npos);
  CHECK(out["brief"] == "use [REDACTED:openai_key] please");
  CHECK(out["list"][1]["deep"] == "[REDACTED:aws_access_key_id]");
  CHECK(out["headers"]["x-api-key"] == "[REDACTED:x-api-key]");
  CHECK(out["[REDACTED:github_token]"] == 1);
  // Twins: ordinary keys and non-string values are untouched.
  CHECK(out["input_tokens"] == 1234);
  CHECK(out["keywords"] == "alpha beta gamma delta");
  CHECK(out["client_secret"] == 12345678);
  CHECK(out["list"][0] == "ok");
  json clean = {{"a", "nothing here"}, {"b", {1, 2, "three"}}};
  json copy = clean;
  CHECK_FALSE(s.scrub_in_place(copy));
  CHECK(copy == clean);
}

TEST_CASE("redaction markers are stable: scrubbing twice changes nothing more") {
  Scrubber s;
  for (const auto& p : planted()) {
    std::string once = s.scrub(p.text);
    CHECK(s.scrub(once) == once);
  }
}

TEST_CASE("operator redact file: one value per line, comments and blank lines skipped") {
  test::TempDir d;
  auto f = d.write("redact.txt", "# values\nfirst-value-123\r\n\nsecond value\n");
  auto v = supervisor::load_redact_file(f);
  REQUIRE(v.size() == 2);
  CHECK(v[0] == "first-value-123");
  CHECK(v[1] == "second value");
  CHECK_THROWS_WITH_AS(supervisor::load_redact_file((d.path() / "missing").string()), doctest::Contains("missing"),
                       std::runtime_error);
}

TEST_CASE("throughput on clean text and on text full of secrets (reported, not asserted)") {
  ScrubOptions o;
  o.literals = {"operator-literal-one", "operator-literal-two"};
  Scrubber s(o);
  std::string clean;
  while (clean.size() < (4u << 20))
    clean += "The quick brown fox reads src/main.c:42 and says {\"tokens\": 1234, \"path\": \"/usr/lib\"}.\n";
  auto t0 = std::chrono::steady_clock::now();
  CHECK(s.scrub(clean) == clean);
  auto t1 = std::chrono::steady_clock::now();
  std::string dirty;
  for (int i = 0; i < 2000; ++i)
    dirty += "line " + std::to_string(i) + " sk-proj-Tq3vX9bK2mLr8sYw4ZcA1nDf6HgJ0pQe5Rt" + std::to_string(i) + "\n";
  std::string out = s.scrub(dirty);
  auto t2 = std::chrono::steady_clock::now();
  CHECK(out.find("Tq3vX9bK2mLr8") == std::string::npos);
  auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
  MESSAGE("clean: " << clean.size() / 1e6 / (ms(t1 - t0) / 1000) << " MB/s; 2000 secrets in " << ms(t2 - t1) << " ms");
}
