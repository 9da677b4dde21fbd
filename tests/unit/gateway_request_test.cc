// The JSON gateway's request mapping (http/gateway_request.h): answers at
// once are JSON whatever bytes the client sent (fuzz/fuzz_gateway.cc found
// an error body quoting a client's byte that was not UTF-8), and a call
// takes exactly its request's bytes.
#include "http/gateway_request.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <string>

#include "etcd/api/etcdserverpb/rpc.pb.h"

namespace etcdq::http {
namespace {

std::string post(const std::string& path, const std::string& body) {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

std::string body_of(const std::string& answer) { return answer.substr(answer.find("\r\n\r\n") + 4); }

TEST(GatewayRequest, ErrorBodyQuotingBytesThatAreNotUtf8IsStillJson) {
  GatewayRoutes routes = gateway_routes();
  for (const std::string& body : {std::string("{\"ID\"\xc9\0\0:\"1\"}", 13), std::string("{\"key\":\"\xff\xfe\"}"),
                                  std::string("{\"key\xed\xa0\x80\":1}"), std::string("{\"k\xe2\x82\":1}")}) {
    GatewayRequest g = map_gateway_request(routes, post("/v3/kv/range", body), false);
    ASSERT_FALSE(g.answer.empty());
    EXPECT_EQ(g.answer.compare(0, 12, "HTTP/1.1 400"), 0) << g.answer;
    google::protobuf::Struct json;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(body_of(g.answer), &json).ok()) << g.answer;
    EXPECT_EQ(json.fields().at("code").number_value(), 3);
  }
}

TEST(GatewayRequest, ErrorBodyKeepsUtf8AndEscapesAsGo) {
  EXPECT_EQ(gateway_error_body(grpc::StatusCode::NOT_FOUND, "caf\xc3\xa9 <a&b> \x01 \xe2\x82"),
            "{\"code\":5,\"message\":\"caf\xc3\xa9 \\u003ca\\u0026b\\u003e \\u0001 \\ufffd\\ufffd\"}");
}

TEST(GatewayRequest, UnaryCallTakesItsRequestAndLeavesThePipelinedOne) {
  GatewayRoutes routes = gateway_routes();
  std::string first = post("/v3/kv/range", "{\"key\":\"Zm9v\"}{\"key\":\"YmFy\"}");
  GatewayRequest g = map_gateway_request(routes, first + "GET /health HTTP/1.1\r\n\r\n", false);
  ASSERT_TRUE(g.answer.empty()) << g.answer;
  ASSERT_NE(g.route, nullptr);
  EXPECT_EQ(g.route->grpc_path, "/etcdserverpb.KV/Range");
  EXPECT_EQ(g.consumed, first.size());
  EXPECT_TRUE(g.keep_open);
  ASSERT_EQ(g.messages.size(), 1u);  // grpc-gateway decodes the first value of a unary body
  etcdserverpb::RangeRequest r;
  ASSERT_TRUE(r.ParseFromString(g.messages[0]));
  EXPECT_EQ(r.key(), "foo");
}

}  // namespace
}  // namespace etcdq::http
