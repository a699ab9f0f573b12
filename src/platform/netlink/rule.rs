//! Policy routing rules (`ip rule`), IPv4 and IPv6.

use super::{IpFamily, Netlink, collect, kernel_err, ok_if_gone};
use crate::platform::cni::CniError;
use ipnetwork::IpNetwork;
use netlink_packet_route::route::RouteHeader;
use netlink_packet_route::rule::{RuleAction, RuleAttribute, RuleMessage};

/// A "look up table `table`" rule, selected by source and/or destination prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub family: IpFamily,
    pub from: Option<IpNetwork>,
    pub to: Option<IpNetwork>,
    pub table: u32,
    /// `None` on add: the kernel picks one below the last rule's.
    pub priority: Option<u32>,
}

impl Rule {
    /// `from <net> lookup <table>`.
    pub fn from(net: IpNetwork, table: u32) -> Self {
        Rule { family: IpFamily::of_net(&net), from: Some(net), to: None, table, priority: None }
    }
    /// `to <net> lookup <table>`.
    pub fn to(net: IpNetwork, table: u32) -> Self {
        Rule { family: IpFamily::of_net(&net), from: None, to: Some(net), table, priority: None }
    }
    pub fn priority(mut self, priority: u32) -> Self {
        self.priority = Some(priority);
        self
    }

    fn to_message(&self) -> Result<RuleMessage, CniError> {
        let mut m = RuleMessage::default();
        m.header.family = self.family.address_family();
        m.header.action = RuleAction::ToTable;
        for net in self.from.iter().chain(&self.to) {
            if IpFamily::of_net(net) != self.family {
                return Err(CniError::invalid_config(format!("rule {self}: {net} is not {:?}", self.family)));
            }
        }
        if let Some(net) = self.from {
            m.header.src_len = net.prefix();
            m.attributes.push(RuleAttribute::Source(net.network()));
        }
        if let Some(net) = self.to {
            m.header.dst_len = net.prefix();
            m.attributes.push(RuleAttribute::Destination(net.network()));
        }
        match u8::try_from(self.table) {
            Ok(t) => m.header.table = t,
            Err(_) => {
                m.header.table = RouteHeader::RT_TABLE_UNSPEC;
                m.attributes.push(RuleAttribute::Table(self.table));
            }
        }
        if let Some(p) = self.priority {
            m.attributes.push(RuleAttribute::Priority(p));
        }
        Ok(m)
    }

    fn from_message(m: &RuleMessage) -> Option<Self> {
        let family = IpFamily::from_address_family(m.header.family)?;
        let mut rule = Rule { family, from: None, to: None, table: u32::from(m.header.table), priority: None };
        for attr in &m.attributes {
            match attr {
                RuleAttribute::Source(ip) => rule.from = IpNetwork::new(*ip, m.header.src_len).ok(),
                RuleAttribute::Destination(ip) => rule.to = IpNetwork::new(*ip, m.header.dst_len).ok(),
                RuleAttribute::Table(t) => rule.table = *t,
                RuleAttribute::Priority(p) => rule.priority = Some(*p),
                _ => {}
            }
        }
        Some(rule)
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(p) = self.priority {
            write!(f, "priority {p} ")?;
        }
        match self.from {
            Some(n) => write!(f, "from {n} ")?,
            None => write!(f, "from all ")?,
        }
        if let Some(n) = self.to {
            write!(f, "to {n} ")?;
        }
        write!(f, "lookup {}", self.table)
    }
}

impl Netlink {
    /// Add a rule. An identical one already present is code 106.
    pub async fn add_rule(&self, rule: &Rule) -> Result<(), CniError> {
        let mut req = self.handle.rule().add();
        *req.message_mut() = rule.to_message()?;
        req.execute().await.map_err(kernel_err(format_args!("adding rule {rule}")))
    }

    /// Delete the first rule matching `rule` (unset fields match anything); none is success.
    pub async fn del_rule(&self, rule: &Rule) -> Result<(), CniError> {
        let msg = rule.to_message()?;
        ok_if_gone(self.handle.rule().del(msg).execute().await, format_args!("deleting rule {rule}"))
    }

    /// The rules of one family, in priority order.
    pub async fn rules(&self, family: IpFamily) -> Result<Vec<Rule>, CniError> {
        let version = match family {
            IpFamily::V4 => rtnetlink::IpVersion::V4,
            IpFamily::V6 => rtnetlink::IpVersion::V6,
        };
        let msgs = collect(self.handle.rule().get(version).execute(), "listing rules").await?;
        Ok(msgs.iter().filter_map(Rule::from_message).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_round_trips_through_its_netlink_message() {
        for table in [200, 1000] {
            let r = Rule::from("10.244.1.5/32".parse().unwrap(), table).priority(1000);
            assert_eq!(Rule::from_message(&r.to_message().unwrap()).unwrap(), r);
        }
        let r = Rule::to("fd00::/64".parse().unwrap(), 200);
        assert_eq!(Rule::from_message(&r.to_message().unwrap()).unwrap(), r);
    }

    #[test]
    fn only_a_table_above_255_goes_in_the_table_attribute() {
        for table in [200, 1000] {
            let m = Rule::from("10.244.1.5/32".parse().unwrap(), table).priority(1000).to_message().unwrap();
            assert_eq!(m.attributes.contains(&RuleAttribute::Table(table)), table > 255);
        }
    }

    #[test]
    fn a_rule_prints_as_ip_rule_shows_it() {
        assert_eq!(Rule::to("fd00::/64".parse().unwrap(), 200).to_string(), "from all to fd00::/64 lookup 200");
    }

    #[test]
    fn mixed_families_are_refused() {
        let mut r = Rule::from("10.0.0.0/8".parse().unwrap(), 200);
        r.to = Some("fd00::/64".parse().unwrap());
        assert_eq!(r.to_message().unwrap_err().code, 7);
    }
}
