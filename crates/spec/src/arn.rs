//! Every ARN the tool writes, built from the spec's `aws.partition`, region and account in this
//! one place: a hand-built `arn:aws:` elsewhere named resources that do not exist in
//! `aws-us-gov` or `aws-cn` (doctor's store ARN did, issue 47 item 11).

use crate::Aws;

/// The partition, region and account every ARN of one cluster is built from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arns<'a> {
    partition: &'a str,
    region: &'a str,
    account: &'a str,
}

impl<'a> Arns<'a> {
    /// The spec's `aws` section; an empty partition (a spec built in code, not loaded) is `aws`,
    /// as loading defaults it.
    pub fn of(aws: &'a Aws) -> Self {
        Self::new(&aws.partition, &aws.region, &aws.account_id)
    }

    pub fn new(partition: &'a str, region: &'a str, account: &'a str) -> Self {
        Self {
            partition: if partition.is_empty() {
                "aws"
            } else {
                partition
            },
            region,
            account,
        }
    }

    pub fn partition(&self) -> &'a str {
        self.partition
    }

    /// An SSM parameter of the account (`name` with or without its leading `/`).
    pub fn ssm_parameter(&self, name: &str) -> String {
        let (p, r, a) = (self.partition, self.region, self.account);
        format!(
            "arn:{p}:ssm:{r}:{a}:parameter/{}",
            name.trim_start_matches('/')
        )
    }

    /// AWS's public parameters (`/aws/service/*`: AMI ids), which belong to no account.
    pub fn ssm_public_parameters(&self) -> String {
        let (p, r) = (self.partition, self.region);
        format!("arn:{p}:ssm:{r}::parameter/aws/service/*")
    }

    /// A Secrets Manager secret by name: Secrets Manager appends `-` and six random characters
    /// to the name, so the ARN matches exactly those six (`-*` would also match a secret
    /// named `<name>-more`).
    pub fn secret(&self, name: &str) -> String {
        let (p, r, a) = (self.partition, self.region, self.account);
        format!("arn:{p}:secretsmanager:{r}:{a}:secret:{name}-??????")
    }

    /// An IAM role of the account (no path).
    pub fn role(&self, name: &str) -> String {
        let (p, a) = (self.partition, self.account);
        format!("arn:{p}:iam::{a}:role/{name}")
    }

    /// An instance profile of the account; `*` for every one.
    pub fn instance_profile(&self, name: &str) -> String {
        let (p, a) = (self.partition, self.account);
        format!("arn:{p}:iam::{a}:instance-profile/{name}")
    }

    /// The account itself as a principal (`:root`).
    pub fn account_root(&self) -> String {
        let (p, a) = (self.partition, self.account);
        format!("arn:{p}:iam::{a}:root")
    }

    /// An AWS managed policy (`AmazonSSMManagedInstanceCore`).
    pub fn managed_policy(&self, name: &str) -> String {
        format!("arn:{}:iam::aws:policy/{name}", self.partition)
    }

    /// An SQS queue of the account.
    pub fn sqs_queue(&self, name: &str) -> String {
        let (p, r, a) = (self.partition, self.region, self.account);
        format!("arn:{p}:sqs:{r}:{a}:{name}")
    }

    /// A KMS key of the account by its key ID.
    pub fn kms_key(&self, key_id: &str) -> String {
        let (p, r, a) = (self.partition, self.region, self.account);
        format!("arn:{p}:kms:{r}:{a}:key/{key_id}")
    }

    /// An EC2 instance of the account.
    pub fn ec2_instance(&self, instance_id: &str) -> String {
        let (p, r, a) = (self.partition, self.region, self.account);
        format!("arn:{p}:ec2:{r}:{a}:instance/{instance_id}")
    }

    /// An EC2 resource of the region in any account (`launch-template/*`, `subnet/*`).
    pub fn ec2_any_account(&self, resource: &str) -> String {
        let (p, r) = (self.partition, self.region);
        format!("arn:{p}:ec2:{r}:*:{resource}")
    }

    /// An EC2 resource of the region that names no account (`image/*`, `snapshot/*`: public
    /// and shared AMIs).
    pub fn ec2_unowned(&self, resource: &str) -> String {
        let (p, r) = (self.partition, self.region);
        format!("arn:{p}:ec2:{r}::{resource}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOV: Arns<'static> = Arns {
        partition: "aws-us-gov",
        region: "us-gov-west-1",
        account: "111122223333",
    };

    #[test]
    fn an_empty_partition_is_aws() {
        assert_eq!(Arns::new("", "us-east-1", "1").partition(), "aws");
        assert_eq!(Arns::new("aws-cn", "cn-north-1", "1").partition(), "aws-cn");
    }

    #[test]
    fn ssm_parameter_with_or_without_a_leading_slash() {
        let want =
            "arn:aws-us-gov:ssm:us-gov-west-1:111122223333:parameter/kubean-karpenter/demo/join";
        assert_eq!(GOV.ssm_parameter("/kubean-karpenter/demo/join"), want);
        assert_eq!(GOV.ssm_parameter("kubean-karpenter/demo/join"), want);
    }

    #[test]
    fn ssm_public_parameters_name_no_account() {
        assert_eq!(
            GOV.ssm_public_parameters(),
            "arn:aws-us-gov:ssm:us-gov-west-1::parameter/aws/service/*"
        );
    }

    #[test]
    fn secret_matches_only_the_six_character_suffix() {
        assert_eq!(
            GOV.secret("kubean-karpenter/demo/join"),
            "arn:aws-us-gov:secretsmanager:us-gov-west-1:111122223333:secret:kubean-karpenter/demo/join-??????"
        );
    }

    #[test]
    fn role() {
        assert_eq!(
            GOV.role("KarpenterNodeRole-demo"),
            "arn:aws-us-gov:iam::111122223333:role/KarpenterNodeRole-demo"
        );
    }

    #[test]
    fn instance_profile() {
        assert_eq!(
            GOV.instance_profile("*"),
            "arn:aws-us-gov:iam::111122223333:instance-profile/*"
        );
    }

    #[test]
    fn account_root() {
        assert_eq!(GOV.account_root(), "arn:aws-us-gov:iam::111122223333:root");
    }

    #[test]
    fn managed_policy() {
        assert_eq!(
            GOV.managed_policy("AmazonSSMManagedInstanceCore"),
            "arn:aws-us-gov:iam::aws:policy/AmazonSSMManagedInstanceCore"
        );
    }

    #[test]
    fn sqs_queue() {
        assert_eq!(
            GOV.sqs_queue("demo"),
            "arn:aws-us-gov:sqs:us-gov-west-1:111122223333:demo"
        );
    }

    #[test]
    fn kms_key() {
        assert_eq!(
            GOV.kms_key("0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"),
            "arn:aws-us-gov:kms:us-gov-west-1:111122223333:key/0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"
        );
    }

    #[test]
    fn ec2_instance() {
        assert_eq!(
            GOV.ec2_instance("i-0abc"),
            "arn:aws-us-gov:ec2:us-gov-west-1:111122223333:instance/i-0abc"
        );
    }

    #[test]
    fn ec2_any_account_and_unowned() {
        assert_eq!(
            GOV.ec2_any_account("subnet/*"),
            "arn:aws-us-gov:ec2:us-gov-west-1:*:subnet/*"
        );
        assert_eq!(
            GOV.ec2_unowned("image/*"),
            "arn:aws-us-gov:ec2:us-gov-west-1::image/*"
        );
    }
}
